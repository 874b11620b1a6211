"""Data: hub download, safe extraction, sentinel paths, materialize, validation, synthetic data."""
