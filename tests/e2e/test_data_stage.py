"""The whole data stage on a small ParaVT-Source/ParaVT-Parquet lookalike: outputs, audit, reruns, bad input."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import av
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from paravt_core.config import DataConfig, load_config
from paravt_core.data.stage import run
from paravt_core.data.validate import DataError
from tests.support.data_support import (
    DATASET_OUTPUTS,
    build_dataset,
    media_urls,
    messages,
    mp4_bytes,
    read_messages,
    sft_table,
    write_zip,
)


def _cfg(tmp: Path, source: Path | str, parquet: Path | str, *extra: str) -> DataConfig:
    return load_config(
        DataConfig,
        None,
        [
            f"download.media_source={source}",
            f"download.parquet_source={parquet}",
            f"work_dir={tmp / 'work'}",
            f"output={tmp / 'out'}",
            *extra,
        ],
    )


def _outputs(out: Path) -> list[str]:
    return sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())


def test_end_to_end_local(tmp_path: Path) -> None:
    source, parquet = build_dataset(tmp_path)
    result = run(_cfg(tmp_path, source, parquet))
    out = tmp_path / "out"
    root = tmp_path / "work" / "media"
    assert _outputs(out) == DATASET_OUTPUTS
    charades = read_messages(out / "sft/paravt_sft_charades_3.parquet")
    assert [media_urls(m) for m in charades] == [
        [f"{root}/museg/charades/c0.mp4"],
        [f"{root}/museg/charades/c1.mp4"],
        [f"{root}/selfqa/s0.mp4"],
    ]
    videor1 = read_messages(out / "sft/paravt_sft_videor1_2.parquet")
    assert media_urls(videor1[0]) == [
        f"{root}/longvt_source/videor1_0/v0.mp4",
        f"{root}/longvt_source/videor1_0/frames/v0_0.jpg",
    ]
    rl = pq.read_table(out / "rl/paravt_rl_diverse_3.parquet")
    assert [v[0]["video"] for v in rl.column("videos").to_pylist()] == [
        f"{root}/museg/charades/c0.mp4",
        f"{root}/selfqa/s0.mp4",
        f"{root}/longvt_source/videor1_0/v0.mp4",
    ]
    assert rl.schema == pq.read_schema(parquet / "paravt_rl_diverse_3.parquet")
    # every materialized path is a plain absolute path to the real video (no file://)
    first = media_urls(charades[0])[0]
    assert not first.startswith("file://") and Path(first).read_bytes() == mp4_bytes("red")
    with av.open(first) as container:
        assert sum(1 for _ in container.decode(video=0)) == 4  # 0.4 s at 10 fps

    audit = json.loads((out / "audit.json").read_text())
    assert audit["totals"]["rows"] == 8 and audit["totals"]["kept"] == 8 and audit["totals"]["passed"]
    assert {f["name"]: f["rows"] for f in audit["files"]} == {
        "paravt_rl_diverse_3.parquet": 3,
        "paravt_sft_charades_3.parquet": 3,
        "paravt_sft_videor1_2.parquet": 2,
    }
    assert result.metrics["sft_rows"] == 5 and result.metrics["rl_rows"] == 3
    assert result.metrics["archives_extracted"] == 4
    assert result.outputs["sft"] == str(out / "sft")
    saved = load_config(DataConfig, out / "config.yaml")
    assert saved.download.media_source == str(source)


def test_rerun_reuses_complete_output_and_redoes_on_change(tmp_path: Path) -> None:
    source, parquet = build_dataset(tmp_path)
    run(_cfg(tmp_path, source, parquet))
    out_file = tmp_path / "out/sft/paravt_sft_charades_3.parquet"
    stamp = out_file.stat().st_mtime_ns
    again = run(_cfg(tmp_path, source, parquet))
    assert again.metrics.get("reused_output") is True
    assert out_file.stat().st_mtime_ns == stamp
    # a changed input parquet means a redo (and the new content is what comes out)
    pq.write_table(
        sft_table([json.dumps(messages("selfqa/s0.mp4"))]), parquet / "paravt_sft_charades_3.parquet"
    )
    redo = run(_cfg(tmp_path, source, parquet))
    assert "reused_output" not in redo.metrics and redo.metrics["archives_extracted"] == 0
    assert [media_urls(m) for m in read_messages(out_file)] == [[f"{tmp_path}/work/media/selfqa/s0.mp4"]]


def test_selective_include_processes_only_the_subset(tmp_path: Path) -> None:
    source, parquet = build_dataset(tmp_path)
    result = run(_cfg(tmp_path, source, parquet, "download.media_include=[museg/charades*]"))
    out = tmp_path / "out"
    assert sorted(os.listdir(tmp_path / "work" / "media")) == [".paravt-extract", "museg"]
    assert _outputs(out) == [
        "_COMPLETE",
        "audit.json",
        "config.yaml",
        "metrics.json",
        "rl/paravt_rl_diverse_3.parquet",
        "sft/paravt_sft_charades_3.parquet",
    ]
    assert len(read_messages(out / "sft/paravt_sft_charades_3.parquet")) == 2
    assert pq.read_table(out / "rl/paravt_rl_diverse_3.parquet").column("id").to_pylist() == ["rl0"]
    audit = json.loads((out / "audit.json").read_text())
    assert audit["totals"]["skipped_not_downloaded"] == 5 and audit["totals"]["rejected"] == 0
    assert audit["not_downloaded"]["groups"] == ["longvt_source/videor1_0", "selfqa"]
    assert result.metrics["archives"] == 1


def _second_charades_archive(tmp: Path) -> tuple[Path, Path]:
    """``build_dataset`` plus ``museg/charades_1.zip`` (c2, c3), which unpacks into the same
    ``museg/charades/`` directory as ``charades_0.zip`` (c0, c1); the Charades parquet references all four."""
    source, parquet = build_dataset(tmp)
    write_zip(
        source / "museg" / "charades_1.zip",
        {"museg/charades/c2.mp4": mp4_bytes("green"), "museg/charades/c3.mp4": mp4_bytes("green")},
    )
    (parquet / "paravt_sft_charades_3.parquet").unlink()
    rows = [json.dumps(messages(f"museg/charades/c{i}.mp4")) for i in range(4)]
    pq.write_table(sft_table(rows), parquet / "paravt_sft_charades_4.parquet")
    return source, parquet


@pytest.mark.parametrize("include", ["museg/charades_0.zip", "museg/charades_0*"])
def test_subset_of_one_groups_archives(tmp_path: Path, include: str) -> None:
    """Only charades_0 of the two Charades archives: rows of charades_1 were not downloaded (not missing)."""
    source, parquet = _second_charades_archive(tmp_path)
    result = run(_cfg(tmp_path, source, parquet, f"download.media_include=[{include}]"))
    out = tmp_path / "out"
    # charades: c0, c1 kept; c2, c3 skipped. videor1: both rows skipped. RL: c0 kept, selfqa + videor1 skipped
    assert pq.read_table(out / "sft/paravt_sft_charades_4.parquet").column("id").to_pylist() == ["r0", "r1"]
    assert pq.read_table(out / "rl/paravt_rl_diverse_3.parquet").column("id").to_pylist() == ["rl0"]
    audit = json.loads((out / "audit.json").read_text())
    totals = audit["totals"]
    assert (totals["rows"], totals["kept"], totals["skipped_not_downloaded"], totals["rejected"]) == (
        9,
        3,
        6,
        0,
    )
    assert audit["not_downloaded"]["groups"] == ["longvt_source/videor1_0", "museg/charades", "selfqa"]
    assert audit["media"]["presence"]["archives_left_out"] == 4  # charades_1, selfqa, videor1_0(+_images)
    assert audit["media"]["presence"]["member_files"] == 2
    assert result.metrics["archives"] == 1

    # a member of the downloaded archive that is gone from the root is truly missing
    (tmp_path / "work" / "media" / "museg" / "charades" / "c1.mp4").unlink()
    with pytest.raises(DataError) as err:
        run(
            _cfg(
                tmp_path,
                source,
                parquet,
                f"download.media_include=[{include}]",
                f"output={tmp_path / 'out2'}",
            )
        )
    assert "1 of 3 rows" in str(err.value) and "missing_file=1" in str(err.value)  # 9 rows - 6 skipped
    audit = json.loads((tmp_path / "out2" / "audit.json").read_text())
    assert audit["missing_files"]["examples"] == ["museg/charades/c1.mp4"]
    assert audit["totals"]["skipped_not_downloaded"] == 6


def test_all_archives_of_a_group_selected_absent_file_is_missing(tmp_path: Path) -> None:
    source, parquet = _second_charades_archive(tmp_path)
    rows = [json.dumps(messages("museg/charades/c0.mp4")), json.dumps(messages("museg/charades/c9.mp4"))]
    pq.write_table(sft_table(rows), parquet / "paravt_sft_charades_4.parquet")
    # every archive of the source is selected: c9 is in none of them, so it is missing, not "not downloaded"
    with pytest.raises(DataError, match="missing_file=1"):
        run(_cfg(tmp_path, source, parquet))


def test_rl_rows_without_question_type_are_kept_as_open_ended(tmp_path: Path) -> None:
    source, parquet = build_dataset(tmp_path)
    path = parquet / "paravt_rl_diverse_3.parquet"
    table = pq.read_table(path)
    extra = pa.array(
        [{"answer": "A", "question_type": "mcq"}, {"answer": "B", "question_type": None}, {"answer": "C"}],
        pa.struct([("answer", pa.string()), ("question_type", pa.string())]),
    )
    pq.write_table(table.set_column(table.schema.get_field_index("extra_info"), "extra_info", extra), path)
    result = run(_cfg(tmp_path, source, parquet))
    rl = pq.read_table(tmp_path / "out/rl/paravt_rl_diverse_3.parquet")
    assert [e["question_type"] for e in rl.column("extra_info").to_pylist()] == ["mcq", "oe", "oe"]
    assert result.metrics["question_type_defaulted"] == 2 and result.metrics["rl_rows"] == 3
    audit = json.loads((tmp_path / "out/audit.json").read_text())
    assert audit["totals"]["question_type_defaulted"] == 2 and audit["totals"]["rejected"] == 0


def test_zip_bomb_bound_is_configurable(tmp_path: Path) -> None:
    source, parquet = build_dataset(tmp_path)
    # selfqa.zip holds one stored mp4: its declared size is the mp4's size
    with pytest.raises(DataError, match=r"selfqa/selfqa\.zip.*extract\.max_archive_bytes=100\b"):
        run(_cfg(tmp_path, source, parquet, "extract.max_archive_bytes=100"))


def test_missing_file_of_a_downloaded_group_counts_as_bad(tmp_path: Path) -> None:
    source, parquet = build_dataset(tmp_path)
    rows = [json.dumps(messages("museg/charades/c0.mp4")), json.dumps(messages("museg/charades/gone.mp4"))]
    pq.write_table(sft_table(rows), parquet / "paravt_sft_charades_3.parquet")
    with pytest.raises(DataError) as err:
        run(_cfg(tmp_path, source, parquet))
    msg = str(err.value)
    assert "1 of 7 rows" in msg and "missing_file=1" in msg and "paravt_sft_charades_3.parquet row 1" in msg
    out = tmp_path / "out"
    assert not (out / "_COMPLETE").exists()
    audit = json.loads((out / "audit.json").read_text())
    assert audit["missing_files"]["by_bucket"] == {"museg/charades": 1}
    assert audit["missing_files"]["rows_by_split"] == {"paravt_sft_charades_3": 1}
    assert audit["missing_files"]["examples"] == ["museg/charades/gone.mp4"]


def test_bad_rows_rejected_good_rows_kept_under_threshold(tmp_path: Path) -> None:
    source, parquet = build_dataset(tmp_path)
    rows = [
        json.dumps(messages("museg/charades/c0.mp4")),
        '[{"role": "user", "content": [{"type": "text", "text": "trunc',
        json.dumps(messages("selfqa/../../outside.mp4")),
        json.dumps(messages("museg/charades/c1.mp4")),
    ]
    pq.write_table(sft_table(rows), parquet / "paravt_sft_charades_3.parquet")
    # 2 bad of 9 rows: the default 0.5% gate fails, naming file, rows and reasons ...
    with pytest.raises(DataError) as err:
        run(_cfg(tmp_path, source, parquet))
    msg = str(err.value)
    assert "2 of 9 rows" in msg
    assert "paravt_sft_charades_3.parquet row 1: messages_not_json" in msg
    assert "paravt_sft_charades_3.parquet row 2: path_escapes_root" in msg
    assert not (tmp_path / "out/_COMPLETE").exists()
    # ... and with a looser gate the good rows go through untouched, the bad ones to rejected/
    run(_cfg(tmp_path, source, parquet, "validate.max_bad_fraction=0.25"))
    out = tmp_path / "out"
    assert (out / "_COMPLETE").exists()
    good = pq.read_table(out / "sft/paravt_sft_charades_3.parquet")
    assert good.column("id").to_pylist() == ["r0", "r3"]
    rejected = pq.read_table(out / "rejected/paravt_sft_charades_3.parquet").to_pydict()
    assert rejected["source_row"] == [1, 2]
    assert rejected["reason"] == ["messages_not_json", "path_escapes_root"]
    assert rejected["messages"] == rows[1:3]
    assert not (tmp_path / "outside.mp4").exists()


def test_corrupt_zip_fails_naming_the_archive(tmp_path: Path) -> None:
    source, parquet = build_dataset(tmp_path)
    (source / "selfqa" / "selfqa.zip").write_bytes(b"garbage" * 100)
    with pytest.raises(DataError, match=r"selfqa/selfqa\.zip.*not a readable zip"):
        run(_cfg(tmp_path, source, parquet))
    assert _outputs(tmp_path / "out") == ["config.yaml"]


def test_zip_slip_member_fails_naming_archive_and_member(tmp_path: Path) -> None:
    source, parquet = build_dataset(tmp_path)
    write_zip(source / "selfqa" / "selfqa.zip", {"selfqa/s0.mp4": mp4_bytes(), "selfqa/../../../pwned": b"x"})
    with pytest.raises(DataError) as err:
        run(_cfg(tmp_path, source, parquet))
    assert "selfqa/selfqa.zip" in str(err.value) and "'selfqa/../../../pwned'" in str(err.value)
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "work" / "media" / "selfqa").exists()
    assert _outputs(tmp_path / "out") == ["config.yaml"]


def test_truncated_parquet_fails_naming_the_file(tmp_path: Path) -> None:
    source, parquet = build_dataset(tmp_path)
    bad = parquet / "paravt_sft_videor1_2.parquet"
    bad.write_bytes(bad.read_bytes()[:100])
    with pytest.raises(DataError) as err:
        run(_cfg(tmp_path, source, parquet))
    assert str(bad) in str(err.value) and "not a readable parquet" in str(err.value)
    assert not (tmp_path / "out" / "_COMPLETE").exists()
    assert not (tmp_path / "out" / "audit.json").exists()


def test_missing_column_fails_naming_file_and_column(tmp_path: Path) -> None:
    source, parquet = build_dataset(tmp_path)
    path = parquet / "paravt_sft_videor1_2.parquet"
    pq.write_table(pq.read_table(path).rename_columns(["id", "conversation", "source"]), path)
    with pytest.raises(DataError) as err:
        run(_cfg(tmp_path, source, parquet))
    assert str(path) in str(err.value) and "missing required column(s) messages" in str(err.value)
    assert not (tmp_path / "out" / "_COMPLETE").exists()


@pytest.mark.parametrize("kind", ["file", "missing"])
def test_unreadable_media_root_fails_clearly(tmp_path: Path, kind: str) -> None:
    _, parquet = build_dataset(tmp_path)
    root = tmp_path / "media-root"
    if kind == "file":
        root.write_text("I am a file")
    with pytest.raises(DataError) as err:
        run(_cfg(tmp_path, "", parquet, f"extract.root={root}"))
    expected = "is not a directory" if kind == "file" else "does not exist"
    assert str(root) in str(err.value) and expected in str(err.value)


def test_existing_root_without_download(tmp_path: Path) -> None:
    """``media_source`` empty: materialize against a root that already holds the extracted media."""
    source, parquet = build_dataset(tmp_path)
    run(_cfg(tmp_path, source, parquet))
    root = tmp_path / "work" / "media"
    shutil.rmtree(tmp_path / "out")
    other = tmp_path / "second"
    cfg = _cfg(other, "", parquet, f"extract.root={root}")
    result = run(cfg)
    assert result.metrics["kept"] == 8 and result.metrics["archives"] == 0
    urls = media_urls(read_messages(other / "out/sft/paravt_sft_charades_3.parquet")[0])
    assert urls == [f"{root}/museg/charades/c0.mp4"]


def test_no_parquet_matches_is_an_error(tmp_path: Path) -> None:
    source, parquet = build_dataset(tmp_path)
    with pytest.raises(DataError, match="no file matches"):
        run(_cfg(tmp_path, source, parquet, "download.parquet_include=[paravt_eval_*]"))


def _tagged_rows(name: str) -> int:
    """Row count from a release-style parquet name (``paravt_sft_tvg_8.parquet`` -> 8; tags under 1000
    are exact counts), worked out from the name alone."""
    tag = name.removesuffix(".parquet").rsplit("_", 1)[1]
    assert tag.isdigit(), name  # the synthetic set is small: exact counts in the names
    return int(tag)


def test_on_synthetic_paravt_data(tmp_path: Path, synth_dataset) -> None:
    """The stage on ``paravt synth`` output (the layout of ParaVT-Source / ParaVT-Parquet)."""
    result = run(_cfg(tmp_path, synth_dataset.source_dir, synth_dataset.parquet_dir))
    out = tmp_path / "out"
    audit = json.loads((out / "audit.json").read_text())
    # every row the generator wrote (counts from its manifest's file names, cross-checked against the
    # input files' own metadata) comes out, per file and in total
    expected = {}
    for kind in ("sft", "rl"):
        for rel in synth_dataset.manifest["parquets"][kind]:
            name = os.path.basename(rel)
            expected[f"{kind}/{name}"] = _tagged_rows(name)
            assert pq.read_metadata(synth_dataset.out_dir / rel).num_rows == expected[f"{kind}/{name}"]
    got = {
        f"{kind}/{p.name}": pq.read_metadata(p).num_rows
        for kind in ("sft", "rl")
        for p in (out / kind).glob("*")
    }
    assert got == expected
    assert result.metrics["kept"] == sum(expected.values())
    assert result.metrics["rl_rows"] == sum(v for k, v in expected.items() if k.startswith("rl/"))
    assert audit["totals"]["rejected"] == 0 and audit["totals"]["skipped_not_downloaded"] == 0
    assert audit["totals"]["rows_rewritten_in_python"] == 0  # synth writes canonical JSON: all columnar
    assert len(list((out / "sft").glob("*.parquet"))) == 7 and len(list((out / "rl").glob("*.parquet"))) == 1
    urls = [u for f in (out / "sft").glob("*.parquet") for m in read_messages(f) for u in media_urls(m)]
    urls += [
        v["video"]
        for v in pq.read_table(next((out / "rl").glob("*.parquet"))).column("videos").to_pylist()[0]
    ]
    assert urls and all(os.path.isfile(u) and u.startswith(str(tmp_path / "work" / "media")) for u in urls)
