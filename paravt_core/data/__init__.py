"""Data: hub download, safe extraction, sentinel paths, materialize, validation (synthetic data: ``paravt_core.synth``)."""
