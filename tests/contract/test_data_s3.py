"""The data stage against a real S3 server (Ceph RGW): s3:// sources, s3:// output, s3:// media prefix."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from paravt_core import storage
from paravt_core.config import DataConfig, load_config
from paravt_core.data.download import fetch
from paravt_core.data.stage import run
from paravt_core.data.validate import DataError
from tests.support.data_support import DATASET_OUTPUTS, build_dataset, jpg_bytes, media_urls, mp4_bytes


def _table(uri: str):
    return pq.read_table(io.BytesIO(storage.read_bytes(uri)))


def test_s3_in_s3_out_with_s3_media(tmp_path: Path, s3_bucket: str) -> None:
    source, parquet = build_dataset(tmp_path)
    storage.upload_dir(source, f"{s3_bucket}/hub/source")
    storage.upload_dir(parquet, f"{s3_bucket}/hub/parquet")
    out = f"{s3_bucket}/runs/1/data"
    media = f"{s3_bucket}/media"
    overrides = [
        f"download.media_source={s3_bucket}/hub/source",
        f"download.parquet_source={s3_bucket}/hub/parquet",
        f"work_dir={tmp_path / 'work'}",
        f"output={out}",
        f"materialize.media_prefix={media}",
    ]
    result = run(load_config(DataConfig, None, overrides))
    assert storage.is_complete(out)
    assert [u[len(out) + 1 :] for u in storage.list_uris(out)] == DATASET_OUTPUTS
    charades = [
        json.loads(m)
        for m in _table(f"{out}/sft/paravt_sft_charades_3.parquet").column("messages").to_pylist()
    ]
    urls = [u for m in charades for u in media_urls(m)]
    assert urls == [
        f"{media}/museg/charades/c0.mp4",
        f"{media}/museg/charades/c1.mp4",
        f"{media}/selfqa/s0.mp4",
    ]
    # the media went up too: every referenced object holds the bytes that were zipped
    assert storage.read_bytes(urls[0]) == mp4_bytes("red")
    assert storage.read_bytes(f"{media}/longvt_source/videor1_0/frames/v0_0.jpg") == jpg_bytes()
    assert not any(".paravt-extract" in u for u in storage.list_uris(media))
    videos = _table(f"{out}/rl/paravt_rl_diverse_3.parquet").column("videos").to_pylist()
    assert [v[0]["video"] for v in videos][0] == f"{media}/museg/charades/c0.mp4"
    assert json.loads(storage.read_bytes(f"{out}/audit.json"))["totals"]["kept"] == 8
    assert result.metrics["kept"] == 8

    # a rerun with nothing changed: downloads are not fetched again and the output is reused
    zip_path = tmp_path / "work/download/media/selfqa/selfqa.zip"
    stamp = zip_path.stat().st_mtime_ns
    again = run(load_config(DataConfig, None, overrides))
    assert again.metrics.get("reused_output") is True
    assert zip_path.stat().st_mtime_ns == stamp


def test_s3_selective_include(tmp_path: Path, s3_bucket: str) -> None:
    source, parquet = build_dataset(tmp_path)
    storage.upload_dir(source, f"{s3_bucket}/src")
    storage.upload_dir(parquet, f"{s3_bucket}/pq")
    overrides = [
        f"download.media_source={s3_bucket}/src",
        f"download.parquet_source={s3_bucket}/pq",
        "download.media_include=[selfqa/*]",
        "download.parquet_include=[paravt_sft_*]",
        f"work_dir={tmp_path / 'work'}",
        f"output={tmp_path / 'out'}",
    ]
    result = run(load_config(DataConfig, None, overrides))
    downloaded = sorted(p.relative_to(tmp_path / "work/download").as_posix()
                        for p in (tmp_path / "work/download").rglob("*") if p.is_file())  # fmt: skip
    assert downloaded == [
        "media/selfqa/selfqa.zip",
        "parquet/paravt_sft_charades_3.parquet",
        "parquet/paravt_sft_videor1_2.parquet",
    ]
    assert result.metrics["kept"] == 1 and result.metrics["skipped_not_downloaded"] == 4
    assert result.metrics["rl_rows"] == 0


# object keys under the source prefix that would land outside the download directory
@pytest.mark.parametrize(
    ("rel", "why"),
    [
        ("museg/../../../evil.zip", "'..' component"),
        ("museg/%2e%2e/%2e%2e/%2e%2e/evil.zip", "'..' component"),
        ("museg\\..\\..\\..\\evil.zip", "'..' component"),
        ("ABSOLUTE", "absolute path"),  # "src/" + an absolute path under tmp_path
    ],
)
def test_s3_source_key_that_escapes_is_refused(tmp_path: Path, s3_bucket: str, rel: str, why: str) -> None:
    if rel == "ABSOLUTE":
        rel = str(tmp_path / "abs" / "evil.zip")
    storage.write_bytes(f"{s3_bucket}/src/museg/charades_0.zip", b"PK fine")
    storage.write_bytes(f"{s3_bucket}/src/{rel}", b"PK evil")
    dest = tmp_path / "work" / "download" / "media"
    with pytest.raises(DataError) as err:
        fetch(f"{s3_bucket}/src", ["*.zip"], str(dest))
    assert repr(rel) in str(err.value) and why in str(err.value)
    assert [p for p in tmp_path.rglob("*") if not p.is_dir()] == []  # nothing fetched, inside or outside


def test_s3_resume_fetches_again_a_local_file_of_another_size(tmp_path: Path, s3_bucket: str) -> None:
    """A rerun after an interrupted download: a local file whose size differs from the object's (a torn
    copy, or an older archive) is fetched again; one of the object's size is taken as done (the documented
    resume rule: sizes only, no checksum, so a same-size local file stays as it is)."""
    whole = b"PK whole archive, 32 bytes long."
    assert len(whole) == 32
    storage.write_bytes(f"{s3_bucket}/src/museg/a.zip", whole)
    storage.write_bytes(f"{s3_bucket}/src/museg/b.zip", b"PK b")
    dest = tmp_path / "dl"
    (dest / "museg").mkdir(parents=True)
    (dest / "museg" / "a.zip").write_bytes(whole[:10])  # torn at 10 of 32 bytes
    (dest / "museg" / "b.zip").write_bytes(b"PK B")  # 4 bytes, as the object: kept
    got = fetch(f"{s3_bucket}/src", ["*.zip"], str(dest))
    assert [(f.name, f.path) for f in got] == [
        ("museg/a.zip", str(dest / "museg" / "a.zip")),
        ("museg/b.zip", str(dest / "museg" / "b.zip")),
    ]
    assert (dest / "museg" / "a.zip").read_bytes() == whole
    assert (dest / "museg" / "b.zip").read_bytes() == b"PK B"
    (dest / "museg" / "a.zip").write_bytes(whole + b" and more")  # longer than the object: fetched again too
    fetch(f"{s3_bucket}/src", ["*.zip"], str(dest))
    assert (dest / "museg" / "a.zip").read_bytes() == whole
