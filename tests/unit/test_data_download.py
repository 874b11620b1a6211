"""Source strings and include patterns of the download step (the hub call itself needs the network)."""

from __future__ import annotations

from pathlib import Path

import pytest

from paravt_core.data import download
from paravt_core.data.download import Source, fetch, left_out, matches, parse_source
from paravt_core.data.validate import DataError


def test_parse_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_source("hf://ParaVT/ParaVT-Source") == Source("hf", "ParaVT/ParaVT-Source")
    assert parse_source("ParaVT/ParaVT-Parquet") == Source("hf", "ParaVT/ParaVT-Parquet")
    assert parse_source("s3://bucket/some/prefix/") == Source("s3", "s3://bucket/some/prefix")
    assert parse_source(str(tmp_path)) == Source("local", str(tmp_path))
    assert parse_source("./data/parquet") == Source("local", "./data/parquet")
    # an existing local directory wins over the repo-id reading of the same string
    (tmp_path / "owner" / "name").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert parse_source("owner/name") == Source("local", "owner/name")
    with pytest.raises(DataError, match="owner/name"):
        parse_source("hf://not-a-repo")


def test_patterns_are_hub_style() -> None:
    assert matches("museg/charades_0.zip", ["museg/charades*"])
    assert not matches("museg/et_instruct_0.zip", ["museg/charades*"])
    assert matches("longvt_source/videor1_0_images.zip", ["*.zip"])  # '*' crosses '/' as on the hub
    assert matches("selfqa/selfqa.zip", ["museg/*", "selfqa/*"])


def test_local_fetch_filters_in_place(tmp_path: Path) -> None:
    for name in (
        "museg/charades_0.zip",
        "museg/et_instruct_0.zip",
        "selfqa/selfqa.zip",
        "README.md",
        ".cache/x.zip",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"z")
    got = fetch(str(tmp_path), ["*.zip"], str(tmp_path / "unused"))
    assert [(f.name, f.path) for f in got] == [
        (n, str(tmp_path / n))
        for n in ("museg/charades_0.zip", "museg/et_instruct_0.zip", "selfqa/selfqa.zip")
    ]
    assert not (tmp_path / "unused").exists()  # local sources are used in place
    assert [f.name for f in fetch(str(tmp_path), ["museg/charades*"], "")] == ["museg/charades_0.zip"]


def test_local_fetch_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no such directory"):
        fetch(str(tmp_path / "nope"), ["*"], "")
    (tmp_path / "f").write_text("x")
    with pytest.raises(DataError, match="not a directory"):
        fetch(str(tmp_path / "f"), ["*"], "")
    (tmp_path / "d").mkdir()
    with pytest.raises(DataError, match="no file matches"):
        fetch(str(tmp_path / "d"), ["*.zip"], "")


def test_left_out_names_what_the_patterns_did_not_select(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("museg/charades_0.zip", "museg/charades_1.zip", "selfqa/selfqa.zip", ".cache/x.zip"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"z")
    assert left_out(str(tmp_path), ["museg/charades_0*"]) == ["museg/charades_1.zip", "selfqa/selfqa.zip"]
    assert left_out(str(tmp_path), ["*.zip"]) == []
    # the hub is listed by one call (it needs the network: replaced here by the listing it would return)
    listing = ["README.md", "museg/charades_0.zip", "museg/charades_1.zip", "selfqa/selfqa.zip"]
    monkeypatch.setattr(download, "hub_files", lambda repo, revision: listing)
    assert left_out("hf://ParaVT/ParaVT-Source", ["museg/*"]) == ["README.md", "selfqa/selfqa.zip"]

    def offline(repo: str, revision: str | None) -> list[str]:
        raise OSError("no network")

    monkeypatch.setattr(download, "hub_files", offline)
    assert left_out("hf://ParaVT/ParaVT-Source", ["museg/*"]) is None  # unknown, not "nothing left out"
