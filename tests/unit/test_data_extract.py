"""Safe, parallel, idempotent extraction of sentinel-path zips into one root."""

from __future__ import annotations

import json
import os
import stat
import zipfile
from pathlib import Path

import pytest

from paravt_core.data.extract import (
    MARKER_DIR,
    Archive,
    Limits,
    archive_key,
    extract_all,
    marker_path,
    part_path,
)
from paravt_core.data.validate import DataError
from tests.support.data_support import MEDIA, build_dataset, jpg_bytes, mp4_bytes, write_zip


def _archives(source: Path) -> list[Archive]:
    return [Archive(name, str(source / name)) for name in sorted(MEDIA)]


def _files(root: Path) -> dict[str, bytes]:
    out = {}
    for path in root.rglob("*"):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not rel.startswith(MARKER_DIR):
            out[rel] = path.read_bytes()
    return out


def test_extracts_all_archives_into_one_root(tmp_path: Path) -> None:
    source, _ = build_dataset(tmp_path)
    root = tmp_path / "root"
    results = extract_all(_archives(source), str(root), workers=2, progress=False)
    expected = {n: (jpg_bytes() if n.endswith(".jpg") else None) for names in MEDIA.values() for n in names}
    files = _files(root)
    assert sorted(files) == sorted(expected)
    assert files["museg/charades/c0.mp4"] == mp4_bytes("red")
    assert files["selfqa/s0.mp4"] == mp4_bytes("blue")
    assert files["longvt_source/videor1_0/frames/v0_0.jpg"] == jpg_bytes()
    assert [r.name for r in results] == sorted(MEDIA)
    assert [r.members for r in results] == [len(MEDIA[n]) for n in sorted(MEDIA)]
    assert not any(r.skipped for r in results)
    for r in results:  # one marker per archive, naming it
        marker = json.loads(Path(marker_path(str(root), r.key)).read_text())
        assert marker["archive"] == r.name and marker["members"] == r.members


def test_rerun_skips_finished_archives(tmp_path: Path) -> None:
    source, _ = build_dataset(tmp_path)
    root = tmp_path / "root"
    extract_all(_archives(source), str(root), progress=False)
    # a file changed by hand after a finished extraction is not touched by a rerun: the archive is skipped
    (root / "selfqa" / "s0.mp4").write_bytes(b"sentinel")
    again = extract_all(_archives(source), str(root), progress=False)
    assert all(r.skipped for r in again)
    assert (root / "selfqa" / "s0.mp4").read_bytes() == b"sentinel"


def test_half_extracted_archive_is_redone(tmp_path: Path) -> None:
    source, _ = build_dataset(tmp_path)
    root = tmp_path / "root"
    archive = Archive("museg/charades_0.zip", str(source / "museg/charades_0.zip"))
    key = archive_key(archive)
    # what a crash mid-archive leaves: one member in place, one partial temp file, no marker
    (root / "museg" / "charades").mkdir(parents=True)
    (root / "museg" / "charades" / "c0.mp4").write_bytes(mp4_bytes("red"))
    partial = Path(part_path(str(root / "museg" / "charades" / "c1.mp4"), key))
    partial.write_bytes(b"half")
    results = extract_all([archive], str(root), progress=False)
    assert not results[0].skipped
    assert (root / "museg/charades/c1.mp4").read_bytes() == mp4_bytes("blue")
    assert not partial.exists()
    assert Path(marker_path(str(root), key)).exists()


def test_changed_archive_gets_a_new_key(tmp_path: Path) -> None:
    a = write_zip(tmp_path / "a.zip", {"selfqa/x.mp4": b"one"})
    k1 = archive_key(Archive("selfqa/a.zip", str(a)))
    write_zip(tmp_path / "a.zip", {"selfqa/x.mp4": b"two"})
    assert archive_key(Archive("selfqa/a.zip", str(a))) != k1


@pytest.mark.parametrize(
    ("member", "mode", "why"),
    [
        ("/etc/evil.mp4", None, "absolute path"),
        ("selfqa/../../evil.mp4", None, "'..' component"),
        ("..\\evil.mp4", None, "'..' component"),
        ("C:/evil.mp4", None, "absolute path"),
        ("selfqa/link.mp4", stat.S_IFLNK | 0o777, "symbolic link"),
        ("selfqa/dev", stat.S_IFCHR | 0o600, "character device"),
        ("selfqa/blk", stat.S_IFBLK | 0o600, "block device"),
        ("selfqa/fifo", stat.S_IFIFO | 0o600, "FIFO"),
        ("selfqa/sock", stat.S_IFSOCK | 0o600, "socket"),
        ("", None, "empty name"),
        ("selfqa/%2e%2e/%2e%2e/evil.mp4", None, "'..' component"),  # percent-encoded ..
        ("%2Fetc/evil.mp4", None, "absolute path"),  # percent-encoded leading /
        ("selfqa\\..\\..\\evil.mp4", None, "'..' component"),  # backslash separators
        (f"{MARKER_DIR}/fake.done", None, "extraction markers"),
    ],
)
def test_zip_slip_members_refuse_the_whole_archive(
    tmp_path: Path, member: str, mode: int | None, why: str
) -> None:
    # the unsafe member comes last: nothing of the archive may be written before it is refused
    members = {"selfqa/ok.mp4": mp4_bytes(), member: b"/etc/passwd"}
    bad = write_zip(tmp_path / "src" / "selfqa" / "bad.zip", members, modes={member: mode} if mode else None)
    root = tmp_path / "root"
    with pytest.raises(DataError) as err:
        extract_all([Archive("selfqa/bad.zip", str(bad))], str(root), progress=False)
    msg = str(err.value)
    assert "selfqa/bad.zip" in msg and repr(member) in msg and why in msg
    assert _files(root) == {}
    assert not os.listdir(root / MARKER_DIR)
    assert not (tmp_path / "evil.mp4").exists() and not Path("/etc/evil.mp4").exists()


def test_corrupt_zip_is_named_and_other_archives_still_extract(tmp_path: Path) -> None:
    source, _ = build_dataset(tmp_path)
    corrupt = tmp_path / "src2" / "museg" / "charades_1.zip"
    corrupt.parent.mkdir(parents=True)
    corrupt.write_bytes(b"PK\x03\x04 this is not really a zip file" * 10)
    root = tmp_path / "root"
    archives = [*_archives(source), Archive("museg/charades_1.zip", str(corrupt))]
    with pytest.raises(DataError) as err:
        extract_all(archives, str(root), progress=False)
    assert "museg/charades_1.zip" in str(err.value) and "not a readable zip" in str(err.value)
    # the good archives were extracted and marked; a rerun after fixing the bad one only does that one
    assert len(os.listdir(root / MARKER_DIR)) == len(MEDIA)
    assert "selfqa/s0.mp4" in _files(root)


def test_crc_mismatch_names_the_member_and_leaves_no_marker(tmp_path: Path) -> None:
    path = write_zip(
        tmp_path / "selfqa" / "selfqa.zip", {"selfqa/a.mp4": b"A" * 4096, "selfqa/b.mp4": b"B" * 4096}
    )
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("selfqa/b.mp4")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    data[start + 100] ^= 0xFF  # flip a byte of b.mp4's stored data; its CRC no longer matches
    path.write_bytes(bytes(data))
    root = tmp_path / "root"
    with pytest.raises(DataError) as err:
        extract_all([Archive("selfqa/selfqa.zip", str(path))], str(root), progress=False)
    assert "selfqa/selfqa.zip" in str(err.value) and "'selfqa/b.mp4'" in str(err.value)
    assert not (root / "selfqa" / "b.mp4").exists()
    assert [p.name for p in (root / "selfqa").iterdir()] == ["a.mp4"]  # no temp file left behind
    assert not os.listdir(root / MARKER_DIR)


def test_root_that_is_a_file_is_refused(tmp_path: Path) -> None:
    source, _ = build_dataset(tmp_path)
    root = tmp_path / "root"
    root.write_text("not a directory")
    with pytest.raises(DataError, match="is not a directory"):
        extract_all(_archives(source), str(root), progress=False)


def test_member_name_with_nul_refuses_the_archive(tmp_path: Path) -> None:
    """zipfile cuts a stored name at NUL ('selfqa/ok.mp4\\0evil' reads as 'selfqa/ok.mp4', a second copy of
    the first member): the name as stored decides."""
    path = write_zip(tmp_path / "selfqa.zip", {"selfqa/ok.mp4": b"good", "selfqa/ok.mp4Xevil": b"evil"})
    path.write_bytes(path.read_bytes().replace(b"ok.mp4Xevil", b"ok.mp4\0evil"))  # same length: offsets hold
    root = tmp_path / "root"
    with pytest.raises(DataError) as err:
        extract_all([Archive("selfqa/selfqa.zip", str(path))], str(root), progress=False)
    assert "selfqa/selfqa.zip" in str(err.value) and "NUL byte" in str(err.value)
    assert _files(root) == {}


def test_symlink_already_in_the_root_is_never_written_through(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "root"
    root.mkdir()
    (root / "selfqa").symlink_to(elsewhere)  # e.g. left by an earlier tool, or a shared scratch dir
    archive = write_zip(tmp_path / "src" / "selfqa.zip", {"museg/charades/a.mp4": b"a", "selfqa/x.mp4": b"x"})
    with pytest.raises(DataError) as err:
        extract_all([Archive("selfqa/selfqa.zip", str(archive))], str(root), progress=False)
    assert "'selfqa/x.mp4'" in str(err.value) and "through an existing symlink" in str(err.value)
    assert list(elsewhere.iterdir()) == []
    assert not (root / "museg").exists()  # refused as a whole: not even the safe member was written


def test_member_names_at_the_file_system_limit_extract(tmp_path: Path) -> None:
    long = "v" * 251 + ".mp4"  # a 255-byte component: NAME_MAX on ext4/xfs/tmpfs
    assert len(long.encode()) == 255
    archive = write_zip(tmp_path / "selfqa.zip", {f"selfqa/{long}": b"long", "selfqa/short.mp4": b"s"})
    root = tmp_path / "root"
    (result,) = extract_all([Archive("selfqa/selfqa.zip", str(archive))], str(root), progress=False)
    assert (root / "selfqa" / long).read_bytes() == b"long"
    assert sorted(p.name for p in (root / "selfqa").iterdir()) == sorted([long, "short.mp4"])  # no temp left
    assert result.files == ("selfqa/short.mp4", f"selfqa/{long}")  # sorted: "s" < "v"


def _deflated(path: Path, members: dict[str, bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def test_zip_bomb_ratio_is_refused_before_writing(tmp_path: Path) -> None:
    # 8 MiB of zeros deflate to about 8 KiB: a ratio near 1000, far above the default bound of 100
    bomb = _deflated(tmp_path / "selfqa.zip", {"selfqa/ok.mp4": b"fine", "selfqa/zeros.bin": bytes(8 << 20)})
    ratio = (8 * 2**20 + 4) / bomb.stat().st_size
    assert ratio > 500
    root = tmp_path / "root"
    with pytest.raises(DataError) as err:
        extract_all([Archive("selfqa/selfqa.zip", str(bomb))], str(root), progress=False)
    msg = str(err.value)
    assert "selfqa/selfqa.zip" in msg and "extract.max_compression_ratio=100" in msg
    assert f"{8 * 2**20 + 4} bytes" in msg
    assert _files(root) == {}
    # a genuine archive that compresses well goes through with a looser bound
    extract_all(
        [Archive("selfqa/selfqa.zip", str(bomb))], str(root), progress=False, limits=Limits(max_ratio=2000)
    )
    assert (root / "selfqa" / "zeros.bin").stat().st_size == 8 << 20


def test_total_uncompressed_size_is_bounded(tmp_path: Path) -> None:
    archive = write_zip(tmp_path / "selfqa.zip", {"selfqa/a.mp4": b"a" * 600, "selfqa/b.mp4": b"b" * 500})
    root = tmp_path / "root"
    with pytest.raises(DataError) as err:  # 600 + 500 = 1100 declared bytes > 1000
        extract_all(
            [Archive("selfqa/selfqa.zip", str(archive))],
            str(root),
            progress=False,
            limits=Limits(max_bytes=1000),
        )
    assert "1100 bytes" in str(err.value) and "extract.max_archive_bytes=1000" in str(err.value)
    assert _files(root) == {}


def test_the_progress_bar_goes_to_stderr_not_stdout(tmp_path: Path, capfd) -> None:
    """stdout carries only the stage's JSON result (`paravt data ... | jq`): the extraction bar goes to stderr."""
    source, _ = build_dataset(tmp_path)
    extract_all(_archives(source), str(tmp_path / "root"), workers=2, progress=True)
    out, err = capfd.readouterr()
    assert out == ""
    assert "extract" in err.lower() or "selfqa" in err, err
