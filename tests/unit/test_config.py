"""Stage configs: YAML + dotted overrides, unknown keys rejected with the valid names listed."""

from __future__ import annotations

import pytest

from paravt_core.cli import main
from paravt_core.config import ConfigError, DataConfig, load_config, parse_override


def test_defaults_without_file() -> None:
    cfg = load_config(DataConfig)
    assert cfg.extract.workers == 2
    assert cfg.validate_.max_bad_fraction == 0.005


def test_yaml_then_overrides_win(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("extract:\n  workers: 3\nvalidate:\n  max_bad_fraction: 0.1\noutput: s3://b/out\n")
    cfg = load_config(DataConfig, path, ["extract.workers=4", "download.media_include=[museg/charades*]"])
    assert cfg.extract.workers == 4  # override beats file
    assert cfg.validate_.max_bad_fraction == 0.1  # file value kept (section given by its alias)
    assert cfg.output == "s3://b/out"
    assert cfg.download.media_include == ["museg/charades*"]


def test_override_values_are_yaml_scalars() -> None:
    assert parse_override("a.b=4") == (["a", "b"], 4)
    assert parse_override("a=0.5") == (["a"], 0.5)
    assert parse_override("a=true") == (["a"], True)
    assert parse_override("a=s3://x/y") == (["a"], "s3://x/y")
    assert parse_override("a=") == (["a"], "")


def test_override_value_keeps_every_equals_sign_after_the_first() -> None:
    # Only the first "=" separates key from value: a URL with a query or a flow mapping holding "=" stays whole.
    url = "s3://b/x?versionId=3&part=2"
    assert parse_override(f"download.media_source={url}") == (["download", "media_source"], url)
    assert parse_override("a.b={k: v=w}") == (["a", "b"], {"k": "v=w"})
    assert parse_override("a==") == (["a"], "=")
    cfg = load_config(DataConfig, None, [f"download.parquet_source={url}", "output=s3://b/o=1"])
    assert cfg.download.parquet_source == url and cfg.output == "s3://b/o=1"


@pytest.mark.parametrize("bad", ["novalue", "=3", "a..b=1"])
def test_malformed_override(bad: str) -> None:
    with pytest.raises(ConfigError):
        parse_override(bad)


def test_unknown_top_level_key_lists_valid_names() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(DataConfig, None, ["extrac.workers=4"])
    msg = str(err.value)
    assert "'extrac'" in msg
    for name in ("download", "extract", "materialize", "validate", "output", "work_dir"):
        assert name in msg


def test_unknown_nested_key_lists_section_names(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("extract:\n  worker: 4\n")
    with pytest.raises(ConfigError) as err:
        load_config(DataConfig, path)
    assert "'extract.worker'" in str(err.value)
    assert "workers" in str(err.value)


def test_type_errors_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="workers"):
        load_config(DataConfig, None, ["extract.workers=many"])
    with pytest.raises(ConfigError, match="max_bad_fraction"):
        load_config(DataConfig, None, ["validate.max_bad_fraction=2"])


def test_non_mapping_file(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(DataConfig, path)


def test_cli_reports_config_errors(capsys) -> None:
    assert main(["data", "extract.nope=1"]) == 2
    assert (
        "valid keys here: max_archive_bytes, max_compression_ratio, root, workers" in capsys.readouterr().err
    )


def test_cli_stage_errors_are_one_clear_line(tmp_path, capsys) -> None:
    missing = tmp_path / "no-such-source"
    code = main(
        [
            "data",
            f"work_dir={tmp_path / 'w'}",
            f"output={tmp_path / 'out'}",
            f"download.media_source={missing}",
            f"download.parquet_source={missing}",
        ]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert str(missing) in err
    assert "Traceback" not in err
