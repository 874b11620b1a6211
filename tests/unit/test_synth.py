"""Synthetic ParaVT data: layout, sentinel archives, pixels vs schedule, parquet schemas, answers, determinism.

Answers are re-derived here from the manifest with an independent solver (regexes over the question
text), not with the generator's own question code.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from torchcodec.decoders import VideoDecoder

from paravt_core.data.schema import SENTINEL_BUCKETS, bucket_of, count_tag, parquet_kind
from paravt_core.synth import SynthResult, encode_frames, make_schedule, synthesize
from tests.support.paths import ROOT

SFT_NAMES = ["charades", "geminicot", "longvideoreason", "museg", "selftrace", "tvg", "videor1"]
BACKGROUND = np.array([60, 60, 60])


# ---------------------------------------------------------------- helpers


def _zip_members(res: SynthResult) -> dict[str, list[str]]:
    out = {}
    for a in res.archives:
        with zipfile.ZipFile(a) as zf:
            out[a.relative_to(res.source_dir).as_posix()] = zf.namelist()
    return out


def _videos_by_path(res: SynthResult) -> dict[str, dict]:
    return {v["path"]: v for v in res.manifest["videos"]}


def _fmt(t: float) -> str:
    return f"{t:.1f}"


def _label(ev: dict) -> str:
    return f"{ev['colour']} {ev['shape']}"


def _solve(question: str, video: dict | None, image: dict | None) -> str:
    """The gold answer of a synthetic question, from the manifest alone."""
    events = sorted(video["events"], key=lambda e: e["start"]) if video else []
    by_label = {_label(e): e for e in events}
    if m := re.search(
        r"Which shape is visible at ([\d.]+) seconds\?\nOptions:\n((?:[A-D]\. .+\n)+)", question
    ):
        t = float(m.group(1))
        visible = [e for e in events if e["start"] <= t < e["end"]]
        assert len(visible) == 1, f"expected exactly one shape at {t}: {question}"
        options = dict(line.split(". ", 1) for line in m.group(2).strip().split("\n"))
        letters = [k for k, v in options.items() if v == _label(visible[0])]
        assert len(letters) == 1, question
        return letters[0]
    if m := re.search(r"When does the (\w+ \w+) appear\?", question):
        e = by_label[m.group(1)]
        return f"{_fmt(e['start'])}, {_fmt(e['end'])}"
    if m := re.search(r'textual sentence: "a (\w+ \w+) appears"', question):
        e = by_label[m.group(1)]
        return f"The event happens in the {_fmt(e['start'])} - {_fmt(e['end'])} seconds."
    if m := re.search(r"right after the (\w+ \w+)\?", question):
        idx = events.index(by_label[m.group(1)])
        return events[idx + 1]["colour"]
    if "How many shapes" in question:
        return str(len(events))
    if "Which shape appears first" in question:
        return _label(events[0])
    if "List every time window" in question:
        return "; ".join(f"{_fmt(e['start'])} - {_fmt(e['end'])}" for e in events)
    if "What colour is the shape in this image" in question:
        return image["colour"]
    if "When does that shape appear in the video" in question:
        e = by_label[f"{image['colour']} {image['shape']}"]
        return f"{_fmt(e['start'])}, {_fmt(e['end'])}"
    raise AssertionError(f"no solver for question: {question!r}")


def _sft_rows(res: SynthResult) -> list[tuple[str, dict, list[dict]]]:
    out = []
    for p in res.sft_parquets:
        for row in pq.read_table(p).to_pylist():
            out.append((p.name, row, json.loads(row["messages"])))
    return out


def _probe_box(bbox: list[int]) -> tuple[slice, slice]:
    """A small box inside circle, square and triangle alike (below the centre, where the triangle is wide)."""
    x0, y0, x1, y1 = bbox
    side = x1 - x0
    cx, cy = (x0 + x1) // 2, (y0 + y1) // 2 + int(0.15 * side)
    half = max(2, int(0.1 * side))
    return slice(cy - half, cy + half), slice(cx - half, cx + half)


# ---------------------------------------------------------------- layout


def test_layout_and_names(synth_dataset: SynthResult) -> None:
    """The manifest against what is on disk: the files that exist, the zips' members and the row counts
    read back from the parquets; the counts themselves worked out by hand."""
    res = synth_dataset
    on_disk = sorted(p.relative_to(res.out_dir).as_posix() for p in res.out_dir.rglob("*") if p.is_file())
    archives = sorted(a.relative_to(res.source_dir).as_posix() for a in res.source_dir.rglob("*.zip"))
    # 4 videos -> slots videor1, charades, et_instruct, selfqa (one per sentinel bucket) + videor1 images.
    assert archives == [
        "longvt_source/videor1_0.zip",
        "longvt_source/videor1_0_images.zip",
        "museg/charades_0.zip",
        "museg/et_instruct_0.zip",
        "selfqa/selfqa.zip",
    ]
    manifest = json.loads(res.manifest_path.read_text())
    assert sorted(manifest["archives"]) == archives
    for archive, members in manifest["archives"].items():
        with zipfile.ZipFile(res.source_dir / archive) as zf:
            assert sorted(zf.namelist()) == members, archive
    for video in manifest["videos"]:
        assert video["path"] in manifest["archives"][video["archive"]]
        assert video["frames"] == 32 and video["duration"] == 8.0  # 8 s at 4 fps
    # Rows per parquet, by hand: RL 4 videos x 3 question families = 12; eval 4 x 2 = 8; an SFT split
    # writes max(6, 2 x its candidate videos) rows, where candidates are its own videos (1 each for
    # charades, museg = et_instruct, videor1) or else all 4 (-> 8); videor1 adds 4 image rows + 1
    # interleaved image + video row: 6 + 5 = 11.
    expected_rows = {
        "parquet/paravt_sft_charades_6.parquet": 6,
        "parquet/paravt_sft_geminicot_8.parquet": 8,
        "parquet/paravt_sft_longvideoreason_8.parquet": 8,
        "parquet/paravt_sft_museg_6.parquet": 6,
        "parquet/paravt_sft_selftrace_8.parquet": 8,
        "parquet/paravt_sft_tvg_8.parquet": 8,
        "parquet/paravt_sft_videor1_11.parquet": 11,
        "parquet/paravt_rl_diverse_12.parquet": 12,
        "eval/synthetic_eval.parquet": 8,
    }
    read_back = {name: pq.read_table(res.out_dir / name).num_rows for name in expected_rows}
    assert read_back == expected_rows
    assert manifest["rows"] == expected_rows
    listed = manifest["parquets"]
    assert sorted(listed["sft"] + listed["rl"] + listed["eval"]) == sorted(expected_rows)
    # Nothing on disk that the manifest does not describe, nothing described that is missing.
    described = ["manifest.json"] + [f"source/{a}" for a in archives] + list(expected_rows)
    assert on_disk == sorted(described)
    assert [
        re.sub(r"_\d+(k\d*)?\.parquet$", "", Path(n).name)[len("paravt_sft_") :] for n in listed["sft"]
    ] == SFT_NAMES
    assert "videos:   4" in res.summary()


def test_full_default_layout_covers_every_archive_kind(tmp_path: Path) -> None:
    res = synthesize(str(tmp_path / "out"), videos=9, seconds=6, seed=3)
    names = {a.relative_to(res.source_dir).as_posix() for a in res.archives}
    assert names == {
        "longvt_source/videor1_0.zip",
        "longvt_source/videor1_0_images.zip",
        "longvt_source/videor1_1.zip",  # 9th video starts the second pass over the slots
        "longvt_source/videor1_1_images.zip",
        "longvt_source/longvideoreason_0_part1.zip",
        "longvt_source/tvg_0.zip",
        "longvt_source/geminicot_0.zip",
        "longvt_source/selftrace_0.zip",
        "museg/charades_0.zip",
        "museg/et_instruct_0.zip",
        "selfqa/selfqa.zip",
    }


def test_zip_members_are_sentinel_paths_in_their_bucket(synth_dataset: SynthResult) -> None:
    members = _zip_members(synth_dataset)
    expected_dir = {  # archive -> directory its members must live in (docs/method.md §2.1)
        "longvt_source/videor1_0.zip": "longvt_source/videor1_0/",
        "longvt_source/videor1_0_images.zip": "longvt_source/videor1_0/",
        "museg/charades_0.zip": "museg/charades/",
        "museg/et_instruct_0.zip": "museg/et_instruct_164k/",
        "selfqa/selfqa.zip": "selfqa/",
    }
    buckets = set()
    for archive, names in members.items():
        assert names, archive
        for name in names:
            assert not name.startswith("/") and ".." not in name.split("/"), name
            assert name.startswith(expected_dir[archive]), (archive, name)
            buckets.add(bucket_of(name))
        if archive.endswith("_images.zip"):
            assert {n.split("/")[2] for n in names} == {"Chart", "Math", "Knowledge", "OCR"}
            assert all(n.endswith(".png") for n in names)
        else:
            assert all(n.endswith(".mp4") for n in names)
    assert buckets == set(SENTINEL_BUCKETS)
    assert [v["bucket"] for v in synth_dataset.videos] == [
        "longvt_source",
        "museg/charades",
        "museg/et_instruct_164k",
        "selfqa",
    ]
    assert members["longvt_source/videor1_0.zip"] == ["longvt_source/videor1_0/CLEVRER/video_0000.mp4"]
    assert re.fullmatch(r"museg/charades/[A-Z0-9]{5}\.mp4", members["museg/charades_0.zip"][0])
    assert re.fullmatch(
        r"selfqa/[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}\.mp4", members["selfqa/selfqa.zip"][0]
    )
    # Regular files with 0644 modes; manifest agrees with the archives.
    for a in synth_dataset.archives:
        with zipfile.ZipFile(a) as zf:
            assert all((i.external_attr >> 16) == 0o100644 for i in zf.infolist())
    assert synth_dataset.manifest["archives"] == members


# ---------------------------------------------------------------- pixels


def test_video_stream_properties(synth_dataset: SynthResult, synth_media_root: Path) -> None:
    for v in synth_dataset.videos:
        with av.open(str(synth_media_root / v["path"])) as container:
            stream = container.streams.video[0]
            assert stream.codec_context.name == "h264"
            assert stream.codec_context.pix_fmt == "yuv420p"
            assert (stream.width, stream.height) == (160, 128)
            n = sum(1 for _ in container.decode(stream))
        assert n == v["frames"] == 32  # 8 s at 4 fps
        assert v["duration"] == 8.0


def test_frames_match_schedule(synth_dataset: SynthResult, synth_media_root: Path) -> None:
    """Every frame of every video: each event's region shows its colour iff start <= t < end."""
    checked_on = checked_off = 0
    for v in synth_dataset.videos:
        dec = VideoDecoder(str(synth_media_root / v["path"]), dimension_order="NHWC")
        batch = dec.get_frames_at(list(range(v["frames"])))
        np.testing.assert_allclose(batch.pts_seconds.numpy(), np.arange(v["frames"]) / 4.0, atol=1e-6)
        frames = batch.data.numpy().astype(float)
        for i, frame in enumerate(frames):
            t = i / 4.0
            active = [e for e in v["events"] if e["start"] <= t < e["end"]]
            assert len(active) <= 1
            for ev in v["events"]:
                ys, xs = _probe_box(ev["bbox"])
                mean = frame[ys, xs].reshape(-1, 3).mean(0)
                dist = np.abs(mean - np.array(ev["rgb"])).max()
                if ev in active:
                    assert dist < 25, (v["path"], t, ev, mean)
                    checked_on += 1
                else:
                    assert dist > 60, (v["path"], t, ev, mean)
                    checked_off += 1
            if not active:  # plain background everywhere
                assert np.abs(frame.reshape(-1, 3).mean(0) - BACKGROUND).max() < 3, (v["path"], t)
    assert checked_on > 20 and checked_off > 50


def test_seek_at_event_boundaries(synth_dataset: SynthResult, synth_media_root: Path) -> None:
    """Seeking to `start` shows the shape, to `start - 0.25` (one frame earlier) and `end` does not."""
    v = synth_dataset.videos[1]
    dec = VideoDecoder(str(synth_media_root / v["path"]), dimension_order="NHWC", seek_mode="approximate")
    for ev in v["events"]:
        ys, xs = _probe_box(ev["bbox"])
        times = [ev["start"], ev["end"] - 0.25, ev["start"] - 0.25, ev["end"]]
        frames = dec.get_frames_played_at(times).data.numpy().astype(float)
        dists = [np.abs(f[ys, xs].reshape(-1, 3).mean(0) - ev["rgb"]).max() for f in frames]
        assert dists[0] < 25 and dists[1] < 25, (ev, dists)
        assert dists[2] > 60 and dists[3] > 60, (ev, dists)


def test_images_show_their_shape(synth_dataset: SynthResult, synth_media_root: Path) -> None:
    images = synth_dataset.manifest["images"]
    assert len(images) == 4
    for im in images:
        pixels = np.asarray(Image.open(synth_media_root / im["path"]).convert("RGB")).astype(float)
        ys, xs = _probe_box(im["bbox"])
        assert np.array_equal(pixels[ys, xs].reshape(-1, 3).mean(0), np.array(im["rgb"], dtype=float))
        assert np.array_equal(pixels[0, 0], BACKGROUND)  # corners stay background (bbox keeps a 2 px margin)


# ---------------------------------------------------------------- parquets


def test_parquet_schemas(synth_dataset: SynthResult) -> None:
    for p in synth_dataset.sft_parquets:
        schema = pq.read_schema(p)
        assert parquet_kind(p.name) == "sft"
        assert schema.field("messages").type == pa.string()  # JSON string, as released
        assert {"id", "source"} <= set(schema.names)  # extra columns the data stage must keep
    (rl,) = synth_dataset.rl_parquets
    schema = pq.read_schema(rl)
    assert parquet_kind(rl.name) == "rl"
    assert schema.field("prompt").type == pa.list_(
        pa.struct([("role", pa.string()), ("content", pa.string())])
    )
    assert schema.field("videos").type == pa.list_(pa.struct([("video", pa.string())]))
    extra = schema.field("extra_info").type
    assert pa.types.is_struct(extra)
    assert extra.field("answer").type == pa.string() and extra.field("question_type").type == pa.string()
    assert {"data_source", "id"} <= set(schema.names)
    eval_schema = pq.read_schema(synth_dataset.eval_parquet)
    assert eval_schema.field("options").type == pa.list_(pa.string())
    assert {"id", "video", "question", "answer", "question_type"} <= set(eval_schema.names)


def test_every_media_reference_is_an_archive_member(synth_dataset: SynthResult) -> None:
    members = {m for names in _zip_members(synth_dataset).values() for m in names}
    refs: list[str] = []
    for _, _, msgs in _sft_rows(synth_dataset):
        for turn in msgs:
            for part in turn["content"]:
                if part["type"] in ("video_url", "image_url"):
                    refs.append(part[part["type"]]["url"])
    for row in pq.read_table(synth_dataset.rl_parquets[0]).to_pylist():
        refs += [v["video"] for v in row["videos"]]
    refs += pq.read_table(synth_dataset.eval_parquet).column("video").to_pylist()
    assert refs and set(refs) <= members
    assert {bucket_of(r) for r in refs} == set(SENTINEL_BUCKETS)
    assert any(r.endswith(".png") for r in refs)


def test_sft_messages_structure_and_tool_traces(synth_dataset: SynthResult) -> None:
    rows = _sft_rows(synth_dataset)
    multi_call_files, no_tool_rows, image_rows, two_round_rows = set(), 0, 0, 0
    for fname, row, msgs in rows:
        where = f"{fname} row {row['id']}"
        assert all(set(t) == {"role", "content"} and isinstance(t["content"], list) for t in msgs), where
        assert all(p["type"] in ("text", "video_url", "image_url") for t in msgs for p in t["content"]), where
        if msgs[0]["role"] == "system":
            system = msgs[0]["content"][0]["text"]
            # Charades rows carry the bare Hermes envelope, the others the general agentic prompt;
            # both hold the schema inside a <tools> block (docs/method.md §2.3, §4.2).
            assert "<tools>" in system, where
            assert ("# Tools" in system) == ("charades" in fname), where
            tool = json.loads(system.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0])
            assert tool["function"]["name"] == "crop_video"
            assert tool["function"]["parameters"]["required"] == ["video_path", "start_time", "end_time"]
        roles = [t["role"] for t in msgs]
        assert roles[-1] == "assistant", where
        calls_per_turn = []
        for k, turn in enumerate(msgs):
            text = "".join(p.get("text", "") for p in turn["content"])
            if turn["role"] != "assistant":
                continue
            assert text.startswith("<think>") and "</think>" in text, where
            calls = re.findall(r"<tool_call>\n(.*?)\n</tool_call>", text, re.S)
            if k == len(msgs) - 1:
                assert not calls and re.search(r"<answer>.+</answer>$", text), where
                continue
            assert calls, where
            responses = re.findall(
                r"<tool_response>\n(.*?)\n</tool_response>", msgs[k + 1]["content"][0]["text"], re.S
            )
            assert msgs[k + 1]["role"] == "user" and len(responses) == len(calls), where
            for body, resp in zip(calls, responses, strict=True):
                call = json.loads(body)
                a, b = call["arguments"]["start_time"], call["arguments"]["end_time"]
                assert call["name"] == "crop_video" and 0 <= a < b <= row["video_duration"], where
                assert resp.startswith(f"Segment {a:.1f}-{b:.1f} s:"), where
            calls_per_turn.append(len(calls))
        if calls_per_turn and calls_per_turn[0] >= 2:
            multi_call_files.add(fname)
        no_tool_rows += not calls_per_turn
        two_round_rows += len(calls_per_turn) == 2
        image_rows += any(p["type"] == "image_url" for t in msgs for p in t["content"])
    assert len(multi_call_files) == 7  # every SFT split has parallel multi-call turns
    assert no_tool_rows > 0 and two_round_rows > 0 and image_rows == 5  # 4 image-only + 1 interleaved


def test_tool_responses_describe_ground_truth(synth_dataset: SynthResult) -> None:
    videos = _videos_by_path(synth_dataset)
    n = 0
    for _, _, msgs in _sft_rows(synth_dataset):
        user = next(t for t in msgs if t["role"] == "user")
        video = next((p["video_url"]["url"] for p in user["content"] if p["type"] == "video_url"), None)
        if video is None:
            continue
        for k, turn in enumerate(msgs[:-1]):
            if turn["role"] != "assistant":
                continue
            text = turn["content"][0]["text"]
            calls = [json.loads(b) for b in re.findall(r"<tool_call>\n(.*?)\n</tool_call>", text, re.S)]
            responses = re.findall(
                r"<tool_response>\n(.*?)\n</tool_response>", msgs[k + 1]["content"][0]["text"], re.S
            )
            for call, resp in zip(calls, responses, strict=True):
                a, b = call["arguments"]["start_time"], call["arguments"]["end_time"]
                mentioned = re.findall(r"a (\w+ \w+) is visible from", resp)
                overlapping = [_label(e) for e in videos[video]["events"] if e["start"] < b and e["end"] > a]
                assert mentioned == overlapping, (resp, a, b)
                n += 1
    assert n > 30


def test_sft_answers_are_correct(synth_dataset: SynthResult) -> None:
    videos = _videos_by_path(synth_dataset)
    images = {im["path"]: im for im in synth_dataset.manifest["images"]}
    seen = 0
    for fname, row, msgs in _sft_rows(synth_dataset):
        user = next(t for t in msgs if t["role"] == "user")
        question = next(p["text"] for p in user["content"] if p["type"] == "text")
        video = next(
            (videos[p["video_url"]["url"]] for p in user["content"] if p["type"] == "video_url"), None
        )
        image = next(
            (images[p["image_url"]["url"]] for p in user["content"] if p["type"] == "image_url"), None
        )
        answer = re.search(r"<answer>(.*)</answer>", msgs[-1]["content"][0]["text"], re.S).group(1)
        assert answer == _solve(question, video, image), (fname, row["id"], question)
        seen += 1
    assert seen == sum(pq.ParquetFile(p).metadata.num_rows for p in synth_dataset.sft_parquets)


def test_rl_rows_answers_match_manifest(synth_dataset: SynthResult) -> None:
    videos = _videos_by_path(synth_dataset)
    rows = pq.read_table(synth_dataset.rl_parquets[0]).to_pylist()
    assert len(rows) == 12
    types = []
    for row in rows:
        (prompt,) = row["prompt"]
        assert prompt["role"] == "user" and prompt["content"].startswith("<video>\n")
        (video,) = row["videos"]
        info = row["extra_info"]
        assert info["answer"] == _solve(prompt["content"], videos[video["video"]], None), row["id"]
        types.append(info["question_type"])
        if info["question_type"] == "mcq":
            assert re.fullmatch(r"[A-D]", info["answer"]) and "\nD. " in prompt["content"]
        if info["question_type"] == "tvg":
            s, e = map(float, info["answer"].split(", "))
            assert 0 <= s < e <= videos[video["video"]]["duration"]
    assert sorted(set(types)) == ["mcq", "oe", "tvg"] and types.count("mcq") == 4
    assert len({r["id"] for r in rows}) == len(rows)
    assert "charades_tvg" in {r["data_source"] for r in rows}


def test_eval_split_answers(synth_dataset: SynthResult) -> None:
    videos = _videos_by_path(synth_dataset)
    rows = pq.read_table(synth_dataset.eval_parquet).to_pylist()
    assert sorted(r["question_type"] for r in rows) == ["mcq"] * 4 + ["tvg"] * 4
    for row in rows:
        assert row["answer"] == _solve(row["question"], videos[row["video"]], None)
        if row["question_type"] == "mcq":
            listed = re.findall(r"^([A-D])\. (.+)$", row["question"], re.M)
            assert [o for _, o in listed] == row["options"]
        else:
            assert row["options"] == []


# ---------------------------------------------------------------- determinism and arguments


def test_same_seed_same_bytes(synth_dataset: SynthResult, tmp_path: Path) -> None:
    again = synthesize(str(tmp_path / "again"), videos=4, seconds=8, seed=0)
    files = sorted(
        p.relative_to(synth_dataset.out_dir) for p in synth_dataset.out_dir.rglob("*") if p.is_file()
    )
    assert files == sorted(p.relative_to(again.out_dir) for p in again.out_dir.rglob("*") if p.is_file())
    for f in files:
        assert (synth_dataset.out_dir / f).read_bytes() == (again.out_dir / f).read_bytes(), f
    # a rerun into the same directory replaces its own output cleanly
    rerun = synthesize(str(tmp_path / "again"), videos=4, seconds=8, seed=0)
    assert rerun.manifest == synth_dataset.manifest


def test_other_seed_other_schedule(synth_dataset: SynthResult, tmp_path: Path) -> None:
    other = synthesize(str(tmp_path / "seed1"), videos=4, seconds=8, seed=1)
    assert [v["events"] for v in other.videos] != [v["events"] for v in synth_dataset.videos]


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="videos must be >= 4"):
        synthesize(str(tmp_path / "a"), videos=3)
    with pytest.raises(ValueError, match="seconds must be >= 5"):
        synthesize(str(tmp_path / "b"), seconds=4)
    with pytest.raises(ValueError, match="local directory"):
        synthesize("s3://bucket/prefix")
    foreign = tmp_path / "foreign"
    (foreign / "parquet").mkdir(parents=True)
    (foreign / "parquet" / "mine.parquet").write_bytes(b"x")
    with pytest.raises(FileExistsError, match="not written by `paravt synth`"):
        synthesize(str(foreign))
    assert (foreign / "parquet" / "mine.parquet").read_bytes() == b"x"


@settings(max_examples=60, deadline=None)
@given(seconds=st.floats(5, 120), seed=st.integers(0, 10**6))
def test_schedule_invariants(seconds: float, seed: int) -> None:
    events = make_schedule(random.Random(seed), seconds, (160, 128))
    assert len(events) >= 2
    assert len({e.colour for e in events}) == len(events)  # labels unique within a video
    for e in events:
        assert e.end - e.start >= 1.0 and e.start >= 0 and e.end <= seconds - 0.5 + 1e-9
        assert (e.start * 2).is_integer() and (e.end * 2).is_integer()  # 0.5 s grid
        x0, y0, x1, y1 = e.bbox
        assert 2 <= x0 < x1 <= 158 and 2 <= y0 < y1 <= 126
    for a, b in zip(events, events[1:], strict=False):
        assert b.start - a.end >= 0.5


def test_schema_helpers() -> None:
    assert [count_tag(n) for n in (6, 999, 4800, 12400, 50000, 15300)] == [
        "6",
        "999",
        "4k8",
        "12k4",
        "50k",
        "15k3",
    ]
    assert parquet_kind("paravt_sft_charades_12k4.parquet") == "sft"
    assert parquet_kind("some/dir/paravt_rl_diverse_4k4.parquet") == "rl"
    assert parquet_kind("paravt_sft_videor1_50k.parquet") == "sft"
    assert parquet_kind("train.parquet") is None
    assert bucket_of("museg/charades/AB12C.mp4") == "museg/charades"
    assert bucket_of("museg/et_instruct_164k/v_x.mp4") == "museg/et_instruct_164k"
    assert bucket_of("museg/other/x.mp4") is None
    assert bucket_of("/data/selfqa/x.mp4") is None
    assert bucket_of("selfqa_extra/x.mp4") is None


def test_data_stage_imports_neither_the_agent_nor_the_generator() -> None:
    """The data stage reads the release's files; synthetic data and the agent's prompts live elsewhere."""
    code = (
        "import sys, paravt_core.data.stage; "
        "print(sorted(m for m in sys.modules if m.startswith(('paravt_core.agent', 'paravt_core.synth'))))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]"


def test_the_one_writer_reports_bad_input_clearly(tmp_path: Path) -> None:
    grey = np.zeros((3, 48, 64), dtype=np.uint8)
    with pytest.raises(ValueError, match=r"N x H x W or N x H x W x 3, got shape \(3, 48, 64, 4\)"):
        encode_frames(tmp_path / "a.mp4", np.zeros((3, 48, 64, 4), dtype=np.uint8), fps=10)
    with pytest.raises(ValueError, match="yuv420p needs even frame sizes, got 63x48"):
        encode_frames(tmp_path / "b.mp4", grey[:, :, :63], fps=10)
    with pytest.raises(RuntimeError, match="ffmpeg failed writing .*c.mp4 \\(3 frames\\): .*no-such-codec"):
        encode_frames(tmp_path / "c.mp4", grey, fps=10, codec="no-such-codec")
    encode_frames(tmp_path / "d.mkv", grey, fps=10)  # grey input, Matroska from the file name
    with av.open(str(tmp_path / "d.mkv")) as container:
        times = [float(f.time) for f in container.decode(video=0)]
    assert times == [0.0, 0.1, 0.2]  # 3 frames at 10 fps
