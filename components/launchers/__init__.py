"""The bodies of the KFP components, one module per component file, imported in the pod (see each module)."""


def stage_config(cls: type, config_yaml: str, overrides: list) -> object:
    """A stage's config from a component's YAML text and its overrides, read as ``paravt <stage> --config`` reads
    a file (``load_config``: a YAML error names the file)."""
    import os
    import tempfile

    from paravt_core.config import load_config

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(config_yaml)
    try:
        return load_config(cls, f.name, [str(o) for o in overrides])
    finally:
        os.unlink(f.name)  # read once: the config object holds all of it
