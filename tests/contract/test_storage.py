"""paravt_core.storage against local paths and a real S3 server (radosgw, see tests/fixtures/s3.py)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

import pytest

from paravt_core import storage

MiB = 1024 * 1024


def blob(n: int, seed: int = 0) -> bytes:
    """Deterministic, incompressible-looking bytes (no two 32-byte blocks alike)."""
    out = bytearray()
    i = 0
    while len(out) < n:
        out += hashlib.sha256(f"{seed}:{i}".encode()).digest()
        i += 1
    return bytes(out[:n])


@pytest.fixture(params=["local", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The same behaviour is required of a local directory and of an S3 prefix."""
    if request.param == "local":
        return str(tmp_path / "store")
    return request.getfixturevalue("s3_bucket") + "/store"


# ------------------------------------------------------------------------------ URIs (no server)


def test_is_s3_and_join() -> None:
    assert storage.is_s3("s3://bucket/a")
    assert not storage.is_s3("/data/a")
    assert not storage.is_s3("relative/a")
    assert storage.join("s3://bucket", "a", "b.txt") == "s3://bucket/a/b.txt"
    assert storage.join("s3://bucket/run/", "/x/", "y") == "s3://bucket/run/x/y"
    assert storage.join("/data", "a", "/b") == "/data/a/b"
    assert storage.split_s3("s3://my-bucket.1/a/b/c") == ("my-bucket.1", "a/b/c")
    assert storage.split_s3("s3://bucket") == ("bucket", "")


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("", "empty URI"),
        ("gs://bucket/a", "unsupported URI 'gs://bucket/a'"),
        ("file:///tmp/a", "unsupported URI"),
        ("s3://", "bad S3 URI 's3://'"),
        ("s3:///key", "bad S3 URI"),
        ("s3://Upper_Case/key", "bucket name 'Upper_Case'"),
        ("s3://ab/key", "bucket name 'ab'"),
    ],
)
def test_bad_uris_are_value_errors(uri: str, words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        storage.read_bytes(uri)


# ------------------------------------------------------------------------------ both backends


def test_bytes_round_trip(root: str) -> None:
    data = bytes(range(256)) * 41 + b"\x00\xff"  # 10,498 bytes incl. every byte value
    uri = storage.join(root, "a", "b.bin")
    storage.write_bytes(uri, data)
    assert storage.read_bytes(uri) == data
    storage.write_bytes(uri, b"second")  # overwrite replaces the whole content
    assert storage.read_bytes(uri) == b"second"
    storage.write_bytes(storage.join(root, "empty"), b"")
    assert storage.read_bytes(storage.join(root, "empty")) == b""


def test_missing_object_names_the_uri(root: str) -> None:
    uri = storage.join(root, "nope", "missing.json")
    with pytest.raises(FileNotFoundError, match="missing.json"):
        storage.read_bytes(uri)
    with pytest.raises(FileNotFoundError, match="missing.json"):
        storage.download_file(uri, "/tmp/never-written")
    assert not os.path.exists("/tmp/never-written")
    with pytest.raises(FileNotFoundError, match="missing.json"):
        storage.local_copy(uri)


def test_exists_and_list(root: str) -> None:
    for key in ["a/1.txt", "a/b/2.json", "a/b/3.txt", "ab/4.txt"]:
        storage.write_bytes(storage.join(root, key), key.encode())
    j = lambda *p: storage.join(root, *p)  # noqa: E731
    assert storage.list_uris(j("a")) == [j("a/1.txt"), j("a/b/2.json"), j("a/b/3.txt")]  # not ab/
    assert storage.list_uris(j("a"), suffix=".txt") == [j("a/1.txt"), j("a/b/3.txt")]
    assert storage.list_uris(root) == [j("a/1.txt"), j("a/b/2.json"), j("a/b/3.txt"), j("ab/4.txt")]
    assert storage.list_uris(j("zzz")) == []
    assert storage.exists(j("a/1.txt"))
    assert storage.exists(j("a/b"))  # a directory / prefix holding objects
    assert not storage.exists(j("a/1.tx"))
    assert not storage.exists(j("a/b/2"))
    assert not storage.exists(j("zzz"))
    storage.delete(j("a/1.txt"))
    assert not storage.exists(j("a/1.txt"))
    storage.delete(j("a/1.txt"))  # already gone: no error


def test_completion_marker(root: str) -> None:
    out = storage.join(root, "run1")
    storage.write_bytes(storage.join(out, "part-0.parquet"), b"rows")
    assert not storage.is_complete(out)
    assert storage.completion_info(out) is None
    storage.mark_complete(out, {"rows": 3, "stage": "data"})
    assert storage.is_complete(out)
    info = storage.completion_info(out)
    assert info is not None and info["info"] == {"rows": 3, "stage": "data"}
    assert info["completed_at"].endswith("+00:00")
    assert storage.list_uris(out) == [storage.join(out, "_COMPLETE"), storage.join(out, "part-0.parquet")]
    assert not storage.is_complete(storage.join(root, "run"))  # a neighbouring prefix is not complete
    storage.clear_complete(out)
    assert not storage.is_complete(out)
    assert storage.read_bytes(storage.join(out, "part-0.parquet")) == b"rows"


def test_file_and_dir_transfer(root: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    files = {"a.txt": b"alpha", "sub/b.bin": blob(70_000, 1), "sub/deeper/c": b"", "z.json": b"{}"}
    for rel, data in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    out = storage.join(root, "tree")
    written = storage.upload_dir(src, out)
    expected = sorted(storage.join(out, rel) for rel in files)
    assert sorted(written) == expected
    assert storage.list_uris(out) == expected
    assert storage.read_bytes(storage.join(out, "sub/b.bin")) == files["sub/b.bin"]

    dst = tmp_path / "dst"
    paths = storage.download_dir(out, dst)
    assert sorted(paths) == sorted(str(dst / rel) for rel in files)
    for rel, data in files.items():
        assert (dst / rel).read_bytes() == data

    one = tmp_path / "one.bin"
    storage.download_file(storage.join(out, "a.txt"), one)
    assert one.read_bytes() == b"alpha"
    storage.upload_file(one, storage.join(root, "copy", "one.bin"))
    assert storage.read_bytes(storage.join(root, "copy", "one.bin")) == b"alpha"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp files left

    with pytest.raises(FileNotFoundError, match="nothing-here"):
        storage.download_dir(storage.join(root, "nothing-here"), tmp_path / "x")
    with pytest.raises(FileNotFoundError, match="no-such-file"):
        storage.upload_file(tmp_path / "no-such-file", storage.join(root, "x"))
    with pytest.raises(FileNotFoundError, match="no-such-dir"):
        storage.upload_dir(tmp_path / "no-such-dir", storage.join(root, "x"))


# ------------------------------------------------------------------------------ remote names -> local paths

# (name, why it is refused): as written, percent-encoded and with backslashes
UNSAFE_NAMES = [
    ("..", "'..' component"),
    ("../evil.txt", "'..' component"),
    ("a/../../evil.txt", "'..' component"),
    ("%2e%2e/evil.txt", "'..' component"),
    ("a/%2E%2E/%2e%2e/evil.txt", "'..' component"),
    ("..\\evil.txt", "'..' component"),
    ("a\\..\\..\\evil.txt", "'..' component"),
    ("/abs/evil.txt", "absolute path"),
    ("\\abs\\evil.txt", "absolute path"),
    ("%2Fabs/evil.txt", "absolute path"),
    ("C:/evil.txt", "absolute path"),
    ("", "empty name"),
    ("a\0b", "NUL byte"),
    ("a%00b", "NUL byte"),
]


@pytest.mark.parametrize(("name", "why"), UNSAFE_NAMES)
def test_safe_join_refuses_names_that_leave_the_root(tmp_path: Path, name: str, why: str) -> None:
    with pytest.raises(storage.UnsafePathError, match=why):
        storage.safe_join(tmp_path, name)


# the whole reason, as the error shows it (the parametrized test above matches only a part)
EXACT_REASONS = [
    ("", "has an empty name or a NUL byte in its name"),
    ("a\0b", "has an empty name or a NUL byte in its name"),
    ("a%00b", "has a NUL byte in its name (percent-encoded)"),
    ("/abs/evil.txt", "has an absolute path"),
    ("a/../../evil.txt", "has a '..' component (would escape the target directory)"),
    ("museg/charades/a.mp4", None),
]


@pytest.mark.parametrize(("name", "reason"), EXACT_REASONS)
def test_unsafe_name_reason_says_exactly_why(name: str, reason: str | None) -> None:
    assert storage.unsafe_name_reason(name) == reason


def test_safe_join_below_the_file_system_root() -> None:
    # "/" is its own realpath; a name below it stays below it ("/" + "tmp/x", no doubled separator)
    assert storage.safe_join("/", "tmp/paravt-never-created/x.mp4") == "/tmp/paravt-never-created/x.mp4"


def test_safe_join_accepts_names_below_the_root_and_refuses_symlinks_out(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    for name in ("museg/charades/a.mp4", "a..b/c..", "100%25 sure.mp4", "./x/./y", "a//b"):
        joined = Path(storage.safe_join(root, name))
        assert root in joined.parents, name  # below the root, whatever the spelling
    assert storage.safe_join(root, "a//b") == str(root / "a" / "b")
    (tmp_path / "elsewhere").mkdir()
    (root / "selfqa").symlink_to(tmp_path / "elsewhere")
    (root / "inside").symlink_to(root / "museg", target_is_directory=True)
    with pytest.raises(storage.UnsafePathError, match="through an existing symlink"):
        storage.safe_join(root, "selfqa/x.mp4")
    assert storage.safe_join(root, "inside/x.mp4") == str(root / "inside" / "x.mp4")  # a link that stays in


# keys below the prefix (what follows "pfx/") that must not become files outside the target directory
ESCAPING_KEYS = [
    ("../../evil.txt", "'..' component"),
    ("sub/../../../evil.txt", "'..' component"),
    ("%2e%2e/%2e%2e/evil.txt", "'..' component"),
    ("..\\..\\evil.txt", "'..' component"),
    (
        "ABSOLUTE",
        "absolute path",
    ),  # replaced by <tmp_path>/abs/evil.txt: the key is "pfx/" + an absolute path
]


@pytest.mark.parametrize(("rel", "why"), ESCAPING_KEYS)
def test_download_dir_refuses_keys_that_leave_the_target(
    s3_bucket: str, tmp_path: Path, rel: str, why: str
) -> None:
    if rel == "ABSOLUTE":
        rel = str(tmp_path / "abs" / "evil.txt")  # a path this test may check, never a system path
    storage.write_bytes(f"{s3_bucket}/pfx/ok.txt", b"fine")
    storage.write_bytes(f"{s3_bucket}/pfx/{rel}", b"evil")  # radosgw stores the key as written
    assert f"{s3_bucket}/pfx/{rel}" in storage.list_uris(f"{s3_bucket}/pfx")
    dst = tmp_path / "one" / "two" / "dst"
    with pytest.raises(storage.UnsafePathError, match=why) as err:
        storage.download_dir(f"{s3_bucket}/pfx", dst)
    assert rel in str(err.value)
    # every key is checked before anything is fetched: no file at all, inside or outside the target
    assert [p for p in tmp_path.rglob("*") if not p.is_dir()] == []


# ------------------------------------------------------------------------------ local only


def test_local_write_is_atomic_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")

    def half_then_fail(tmp: Path) -> None:
        tmp.write_bytes(b"new-but-partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        storage._atomic_local_write(target, half_then_fail)
    assert target.read_bytes() == b"old"  # readers never see the partial write
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]  # temp file removed


def test_local_copy_of_local_path_is_the_path(tmp_path: Path) -> None:
    path = tmp_path / "v.mp4"
    path.write_bytes(b"x")
    assert storage.local_copy(str(path)) == str(path)


# ------------------------------------------------------------------------------ S3 only


def multipart_etag(data: bytes, part: int) -> str:
    """The ETag S3 gives a multipart object: md5 of the parts' md5 digests, then '-<number of parts>'."""
    digests = [hashlib.md5(data[i : i + part]).digest() for i in range(0, len(data), part)]
    return f'"{hashlib.md5(b"".join(digests)).hexdigest()}-{len(digests)}"'


def test_large_file_goes_multipart(s3_bucket: str, tmp_path: Path) -> None:
    data = blob(12 * MiB + 3, 2)  # 3 parts of 5 MiB (the S3 minimum part size) with a lower threshold
    src = tmp_path / "big.bin"
    src.write_bytes(data)
    cfg = storage.transfer_config(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)
    uri = f"{s3_bucket}/big/big.bin"
    storage.upload_file(src, uri, transfer=cfg)
    bucket, key = storage.split_s3(uri)
    head = storage.s3_client().head_object(Bucket=bucket, Key=key)
    assert head["ContentLength"] == len(data)
    assert head["ETag"] == multipart_etag(data, 5 * MiB)  # proves 3 parts of exactly 5 MiB were uploaded
    dst = tmp_path / "back.bin"
    storage.download_file(uri, dst, transfer=cfg)  # parallel ranged GETs
    assert hashlib.sha256(dst.read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest()
    # below the threshold: a single PUT, whose ETag is the plain md5
    storage.upload_file(src, uri)
    assert (
        storage.s3_client().head_object(Bucket=bucket, Key=key)["ETag"]
        == f'"{hashlib.md5(data).hexdigest()}"'
    )


def test_missing_bucket_is_file_not_found(s3_env: object) -> None:
    with pytest.raises(FileNotFoundError, match=r"s3://no-such-bucket-xyz/k: no such bucket"):
        storage.read_bytes("s3://no-such-bucket-xyz/k")
    assert not storage.exists("s3://no-such-bucket-xyz/k")
    assert storage.list_uris("s3://no-such-bucket-xyz/") == []


def test_client_is_cached_and_follows_env(s3_env: object, monkeypatch: pytest.MonkeyPatch) -> None:
    first = storage.s3_client()
    seen: list[object] = []
    threads = [threading.Thread(target=lambda: seen.append(storage.s3_client())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(c is first for c in seen)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "3")
    second = storage.s3_client()
    assert second is not first
    assert second.meta.config.retries == {"total_max_attempts": 3, "mode": "standard"}  # 3 tries in all
    assert second.meta.config.s3 == {"addressing_style": "path"}


def count_gets() -> list[str]:
    """Record the key of every GetObject the storage client sends from now on."""
    keys: list[str] = []
    storage.s3_client().meta.events.register(
        "before-call.s3.GetObject", lambda params, **_: keys.append(params["url_path"])
    )
    return keys


def test_local_copy_downloads_once_and_tracks_changes(s3_bucket: str, tmp_path: Path) -> None:
    cache = str(tmp_path / "cache")
    uri = f"{s3_bucket}/media/clip.mp4"
    storage.write_bytes(uri, b"version-1")
    gets = count_gets()
    paths: list[str] = []
    threads = [
        threading.Thread(target=lambda: paths.append(storage.local_copy(uri, cache))) for _ in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(paths) == 6 and len(set(paths)) == 1
    assert len(gets) == 1  # six concurrent callers, one download
    path = paths[0]
    assert path.endswith("/clip.mp4") and path.startswith(cache)  # keeps the name (decoders look at it)
    assert Path(path).read_bytes() == b"version-1"
    assert storage.local_copy(uri, cache) == path and len(gets) == 1  # cached

    storage.write_bytes(uri, b"version-2, longer")  # new ETag and size: fetched again
    new_path = storage.local_copy(uri, cache)
    assert new_path != path and Path(new_path).read_bytes() == b"version-2, longer"
    assert len(gets) == 2


def test_local_copy_refetches_an_object_replaced_by_one_of_the_same_size(
    s3_bucket: str, tmp_path: Path
) -> None:
    """Same key, same size, other bytes (a re-encoded clip of equal length): only the ETag tells them apart."""
    cache = str(tmp_path / "cache")
    uri = f"{s3_bucket}/media/clip.mp4"
    bucket, key = storage.split_s3(uri)

    def etag() -> str:
        return storage.s3_client().head_object(Bucket=bucket, Key=key)["ETag"]

    storage.write_bytes(uri, b"version-1")
    first, etag_1 = storage.local_copy(uri, cache), etag()
    assert Path(first).read_bytes() == b"version-1"
    storage.write_bytes(uri, b"version-2")  # 9 bytes again
    assert etag() != etag_1  # radosgw: the MD5 of a single-part object
    second = storage.local_copy(uri, cache)
    assert Path(second).read_bytes() == b"version-2"
    assert second != first


def test_local_copy_of_a_short_download_says_how_many_bytes_came(
    s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault injected: the download writes 4 of the object's 9 bytes. The error names both sizes (it used to
    stat the file it had just removed and raise FileNotFoundError instead) and no copy is left behind."""
    uri = f"{s3_bucket}/media/short.mp4"
    storage.write_bytes(uri, b"version-1")

    def short_download(text: str, target: Path) -> None:
        Path(target).write_bytes(b"vers")

    monkeypatch.setattr(storage, "download_file", short_download)
    with pytest.raises(OSError, match=r"downloaded 4 bytes, expected 9$"):
        storage.local_copy(uri, str(tmp_path / "cache"))
    assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and ".locks" not in p.parts] == []


def test_local_copy_cache_is_size_bounded(s3_bucket: str, tmp_path: Path) -> None:
    cache = str(tmp_path / "cache")
    uris = [f"{s3_bucket}/m/{i}.bin" for i in range(3)]
    for i, uri in enumerate(uris):
        storage.write_bytes(uri, blob(1000, i))
    p0 = storage.local_copy(uris[0], cache, max_bytes=2500)
    p1 = storage.local_copy(uris[1], cache, max_bytes=2500)
    os.utime(p0, (1, 1))  # make entry 0 the least recently used
    os.utime(p1, (2, 2))
    p2 = storage.local_copy(uris[2], cache, max_bytes=2500)  # 3000 bytes > 2500: evict entry 0 only
    assert not os.path.exists(p0)
    assert Path(p1).read_bytes() == blob(1000, 1)
    assert Path(p2).read_bytes() == blob(1000, 2)
    assert storage.local_copy(uris[0], cache, max_bytes=2500) == p0  # fetched again, same place
    assert Path(p0).read_bytes() == blob(1000, 0)
    assert not os.path.exists(p1)  # now entry 1 was the oldest


def test_completion_info_is_json_on_s3(s3_bucket: str) -> None:
    storage.mark_complete(s3_bucket + "/out", {"files": 2})
    raw = storage.read_bytes(s3_bucket + "/out/_COMPLETE")
    assert json.loads(raw)["info"] == {"files": 2}


def test_safe_join_refuses_a_sibling_that_shares_the_roots_name(tmp_path: Path) -> None:
    """``root/link -> root-evil``: ``/x/root-evil/f`` starts with the string ``/x/root`` but is not below
    ``/x/root/``; a prefix check without the separator would accept it."""
    root, evil = tmp_path / "root", tmp_path / "root-evil"
    root.mkdir()
    evil.mkdir()
    (root / "link").symlink_to(evil, target_is_directory=True)
    with pytest.raises(storage.UnsafePathError, match="through an existing symlink"):
        storage.safe_join(root, "link/x.mp4")
    # the root itself and a real child stay accepted
    assert storage.safe_join(root, "a/x.mp4") == str(root / "a" / "x.mp4")
