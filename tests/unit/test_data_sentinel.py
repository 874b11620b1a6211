"""Sentinel-path rules: per-string and columnar classification agree; buckets, groups, prefixes."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from paravt_core.data import sentinel

CASES = [
    ("museg/charades/a.mp4", sentinel.OK),
    ("museg/et_instruct_164k/x/y.mp4", sentinel.OK),
    ("longvt_source/videor1_3/CLEVRER/v.mp4", sentinel.OK),
    ("selfqa/q.mp4", sentinel.OK),
    ("file://selfqa/q.mp4", sentinel.OK),  # the release's prefix on input is tolerated
    ("", sentinel.EMPTY),
    (None, sentinel.EMPTY),
    ("selfqa/", sentinel.NOT_SENTINEL),  # the bucket directory itself
    ("museg/charadesX/a.mp4", sentinel.NOT_SENTINEL),
    ("/abs/selfqa/q.mp4", sentinel.NOT_SENTINEL),
    ("file:///data/selfqa/q.mp4", sentinel.NOT_SENTINEL),
    ("https://host/selfqa/q.mp4", sentinel.NOT_SENTINEL),
    ("other/q.mp4", sentinel.NOT_SENTINEL),
    ("selfqa/../../etc/passwd", sentinel.ESCAPES_ROOT),
    ("longvt_source/../x.mp4", sentinel.ESCAPES_ROOT),
    ("selfqa/a/..", sentinel.ESCAPES_ROOT),
    ("selfqa/a..b/c.mp4", sentinel.OK),  # '..' inside a name is not a component
    ("selfqa/..hidden.mp4", sentinel.OK),
]


@pytest.mark.parametrize(("path", "status"), CASES)
def test_classify_cases(path: str | None, status: int) -> None:
    assert sentinel.classify(path) == status


def test_classify_array_matches_cases() -> None:
    paths = [p for p, _ in CASES]
    expected = [s for _, s in CASES]
    assert sentinel.classify_array(pa.array(paths, pa.string())).tolist() == expected
    assert sentinel.classify_array(pa.array(paths, pa.large_string())).tolist() == expected


_piece = st.sampled_from(["selfqa", "museg", "charades", "museg/charades", "longvt_source", "a", "..", ".",
                          "", "file:", "x.mp4", "et_instruct_164k", "é", "\n", "file://selfqa"])  # fmt: skip


@given(st.lists(st.lists(_piece, min_size=1, max_size=5).map("/".join) | st.none(), min_size=1, max_size=20))
def test_columnar_and_per_string_agree(paths: list[str | None]) -> None:
    codes = sentinel.classify_array(pa.array(paths, pa.string())).tolist()
    assert codes == [sentinel.classify(p) for p in paths]


def test_bucket_and_group() -> None:
    assert sentinel.bucket_of("museg/et_instruct_164k/a.mp4") == "museg/et_instruct_164k"
    assert sentinel.bucket_of("other/a.mp4") is None
    assert sentinel.group_of("longvt_source/tvg_2/x/y.mp4") == "longvt_source/tvg_2"
    assert sentinel.group_of("longvt_source/x.mp4") == "longvt_source"
    assert sentinel.group_of("file://selfqa/q.mp4") == "selfqa"


def test_materialize_path_and_array() -> None:
    assert sentinel.materialize_path("file://selfqa/q.mp4", "/m") == "/m/selfqa/q.mp4"
    assert sentinel.materialize_path("selfqa/q.mp4", "s3://b/media") == "s3://b/media/selfqa/q.mp4"
    out = sentinel.materialize_array(pa.array(["selfqa/q.mp4", None, "file://museg/charades/a.mp4"]), "/m")
    assert out.to_pylist() == ["/m/selfqa/q.mp4", None, "/m/museg/charades/a.mp4"]


def test_media_prefix(tmp_path) -> None:
    assert sentinel.media_prefix(str(tmp_path / "root"), "") == str(tmp_path / "root")
    assert sentinel.media_prefix("/x", "s3://bucket/media/") == "s3://bucket/media"
    assert sentinel.media_prefix("/x", "/other/dir/") == "/other/dir"


def test_present_groups(tmp_path) -> None:
    (tmp_path / "museg" / "charades").mkdir(parents=True)
    (tmp_path / "longvt_source" / "tvg_0").mkdir(parents=True)
    (tmp_path / "unrelated").mkdir()
    assert sentinel.present_groups(str(tmp_path)) == {
        "museg/charades",
        "longvt_source",
        "longvt_source/tvg_0",
    }
