"""Fixture copies of every benchmark: a few hand-written rows in each benchmark's real schema and file layout,
pointing at synthetic videos whose events make the gold answers true.

``write_fixtures(root)`` writes, under ``root``:

    synthetic/          ``paravt synth`` output (4 videos x 8 s) and its media extracted to synthetic/media
    videomme/           videomme/test-00000-of-00001.parquet, data/<videoID>.mp4, subtitle/<videoID>.srt
    longvideobench/     validation-00000-of-00001.parquet, videos/<video_path>, subtitles/<id>_en.json
    lvbench/            video_info.meta.jsonl (the original nesting), <key>.mp4
    mlvu/               test-00000-of-00001.parquet, <video_name>
    mmvu/               validation.json (hub URLs for videos), videos/<Subject>/<file>.mp4
    charades/           data/test-00000-of-00001.parquet (timestamp as float16 pairs), Charades_v1_480/<video>

and ``benchmarks.json`` (the eval stage's ``DEMO_MANIFEST``: the ``benchmarks`` config entries that evaluate
them, paths relative to ``root``), and returns those entries with absolute paths. The eval stage's ``demo_data``
reads only that manifest: production code never imports ``paravt_core.synth``, so the fixtures are written by
whoever runs the tiny eval (``paravt synth DIR --eval-fixtures``, ``paravt demo``, the tests). Column names,
option layout, answer encoding, duration and timestamp formats follow the datasets' cards and their public
loaders (see ``paravt_core.eval.benchmarks``); the questions are ours, about the coloured shapes of two
schedules (``VIDEO_A``, ``VIDEO_B``). Every video is 8 s at 8 fps: 64 frames, the count the release's overview
samples (``preset=release``), at 128 x 96 (the synthetic benchmark's at 160 x 128).
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from paravt_core.eval.benchmarks import DEMO_MANIFEST
from paravt_core.synth.dataset import synthesize
from paravt_core.synth.scenes import Event, write_video

# 8 fps: 64 frames in 8 s, as many as the release's overview takes (qwen-vl-utils ``nframes=64``; a shorter video
# gets no frames at all under preset=release, release_frames.overview_fail_soft). Small frames keep the encode cheap.
SECONDS, FPS, SIZE = 8.0, 8.0, (128, 96)
# A: red circle [1, 3) s, then blue square [4.5, 6.5) s.  B: green triangle [0.5, 2.5) s, yellow circle [5, 7) s.
VIDEO_A = (
    Event("circle", "red", 1.0, 3.0, (10, 10, 60, 60)),
    Event("square", "blue", 4.5, 6.5, (50, 20, 110, 80)),
)
VIDEO_B = (
    Event("triangle", "green", 0.5, 2.5, (20, 10, 80, 70)),
    Event("circle", "yellow", 5.0, 7.0, (40, 20, 100, 80)),
)
MARKER = "_FIXTURES_COMPLETE"

VIDEOMME_ROWS = [
    {"video_id": "001", "duration": "short", "domain": "Knowledge", "sub_category": "Humanity & History",
     "url": "https://www.youtube.com/watch?v=fxSynthA001", "videoID": "fxSynthA001", "question_id": "001-1",
     "task_type": "Object Recognition", "question": "Which shape appears first in the video?",
     "options": ["A. A blue square.", "B. A red circle.", "C. A green triangle.", "D. A yellow circle."],
     "answer": "B"},
    {"video_id": "002", "duration": "medium", "domain": "Life Record", "sub_category": "Daily Life",
     "url": "https://www.youtube.com/watch?v=fxSynthB002", "videoID": "fxSynthB002", "question_id": "002-1",
     "task_type": "Attribute Perception", "question": "What colour is the circle in the video?",
     "options": ["A. Red.", "B. Blue.", "C. Yellow.", "D. Green."], "answer": "C"},
    {"video_id": "003", "duration": "long", "domain": "Knowledge", "sub_category": "Technology",
     "url": "https://www.youtube.com/watch?v=fxSynthC003", "videoID": "fxSynthC003", "question_id": "003-1",
     "task_type": "Counting Problem", "question": "How many shapes appear one after another?",
     "options": ["A. One.", "B. Two.", "C. Three.", "D. Four."], "answer": "B"},
]  # fmt: skip
VIDEOMME_SUBTITLES = {
    "fxSynthA001": [(0.5, 2.9, "A red circle shows up."), (4.4, 6.6, "Now a blue square.")],
    "fxSynthB002": [(0.4, 2.6, "First a green triangle."), (4.9, 7.1, "Then a yellow circle.")],
}  # fxSynthC003 has no subtitle file: the question says so

LVB_ROWS = [
    {"video_id": "fxLvbA0001", "id": "fxLvbA0001_0", "video_path": "fxLvbA0001.mp4",
     "subtitle_path": "fxLvbA0001_en.json", "correct_choice": 1,
     "question": "What is on screen at 2 seconds?", "option0": "a blue square", "option1": "a red circle",
     "option2": "a green triangle", "option3": "an empty grey frame", "option4": "N/A", "duration": 8.0,
     "duration_group": 15, "question_category": "T3O", "topic_category": "KI-Knowledge",
     "starting_timestamp_for_subtitles": 0.0},
    {"video_id": "fxLvbB0002", "id": "fxLvbB0002_0", "video_path": "fxLvbB0002.mp4",
     "subtitle_path": "fxLvbB0002_en.json", "correct_choice": 4,
     "question": "Which shape is visible right before the yellow circle?", "option0": "a red circle",
     "option1": "a blue square", "option2": "a yellow triangle", "option3": "a red triangle",
     "option4": "a green triangle", "duration": 8.0, "duration_group": 15, "question_category": "E2O",
     "topic_category": "NP-News-Programs", "starting_timestamp_for_subtitles": 0.0},
]  # fmt: skip

LVBENCH_META = [
    {"key": "fxLvbenchB", "type": "cartoon",
     "video_info": {"duration_minutes": SECONDS / 60, "fps": FPS, "resolution": {"width": SIZE[0], "height": SIZE[1]}},
     "qa": [
         {"uid": "90001", "question": "Which shape appears last?\n(A) green triangle\n(B) yellow circle\n"
                                      "(C) red circle\n(D) blue square",
          "answer": "B", "question_type": ["key information retrieval"], "time_reference": "00:05-00:07"},
         {"uid": "90002", "question": "What colour is the triangle?\n(A) green\n(B) red\n(C) blue\n(D) yellow",
          "answer": "A", "question_type": ["entity recognition"], "time_reference": "00:00-00:03"},
     ]},
]  # fmt: skip

MLVU_ROWS = [
    {"video_name": "fx_plotQA_1.mp4", "duration": 8.0,
     "question": "What colour is the square?\n(A) Red\n(B) Blue\n(C) Green\n(D) Yellow",
     "candidates": ["Red", "Blue", "Green", "Yellow"], "answer": "B", "task_type": "plotQA",
     "question_id": "fx_plotQA_1"},
    {"video_name": "fx_count_1.mp4", "duration": 8.0, "question": "How many shapes appear in the video?",
     "candidates": ["1", "2", "3", "4"], "answer": "B", "task_type": "count", "question_id": "fx_count_1"},
    {"video_name": "fx_order_1.mp4", "duration": 8.0, "question": "In which order do the shapes appear?",
     "candidates": ["yellow circle, green triangle", "green triangle, yellow circle"], "answer": "B",
     "task_type": "order", "question_id": "fx_order_1"},
]  # fmt: skip

MMVU_ROWS = [
    {"id": "fx-mc-0", "video": "https://huggingface.co/datasets/yale-nlp/MMVU/resolve/main/videos/Physics/fx_0.mp4",
     "question": "Which shape appears after the red circle?",
     "choices": {"A": "green triangle", "B": "blue square", "C": "yellow circle", "D": "red square", "E": "nothing"},
     "answer": "B", "question_type": "multiple-choice",
     "metadata": {"subject": "Physics", "textbook": "synthetic", "rationale": "the square follows the circle"}},
    {"id": "fx-oe-0", "video": "https://huggingface.co/datasets/yale-nlp/MMVU/resolve/main/videos/Physics/fx_0.mp4",
     "question": "What colour is the square?", "choices": {}, "answer": "blue", "question_type": "open-ended",
     "metadata": {"subject": "Physics", "textbook": "synthetic", "rationale": "the square is blue"}},
]  # fmt: skip

CHARADES_ROWS = [
    {"video": "FXA01.mp4", "caption": "a red circle appears", "timestamp": [1.0, 3.0]},
    {"video": "FXB02.mp4", "caption": "a yellow circle appears", "timestamp": [5.0, 7.0]},
]

# benchmark -> (video file relative to its root, schedule)
VIDEOS: dict[str, list[tuple[str, tuple[Event, ...]]]] = {
    "videomme": [
        ("data/fxSynthA001.mp4", VIDEO_A),
        ("data/fxSynthB002.mp4", VIDEO_B),
        ("data/fxSynthC003.mp4", VIDEO_A),
    ],  # fmt: skip
    "longvideobench": [("videos/fxLvbA0001.mp4", VIDEO_A), ("videos/fxLvbB0002.mp4", VIDEO_B)],
    "lvbench": [("fxLvbenchB.mp4", VIDEO_B)],
    "mlvu": [("fx_plotQA_1.mp4", VIDEO_A), ("fx_count_1.mp4", VIDEO_A), ("fx_order_1.mp4", VIDEO_B)],
    "mmvu": [("videos/Physics/fx_0.mp4", VIDEO_A)],
    "charades": [("Charades_v1_480/FXA01.mp4", VIDEO_A), ("Charades_v1_480/FXB02.mp4", VIDEO_B)],
}


def _srt(cues: list[tuple[float, float, str]]) -> str:
    def stamp(t: float) -> str:
        ms = round(t * 1000)
        return f"{ms // 3600000:02d}:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d},{ms % 1000:03d}"

    blocks = [
        f'{i}\n{stamp(a)} --> {stamp(b)}\n<font color="white" size=".72c">{text}</font>'
        for i, (a, b, text) in enumerate(cues, 1)
    ]
    return "\n\n".join(blocks) + "\n"


def _parquet(path: Path, rows: list[dict[str, Any]], schema: pa.Schema | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def _write_rows(root: Path) -> None:
    _parquet(root / "videomme/videomme/test-00000-of-00001.parquet", VIDEOMME_ROWS)
    for video_id, cues in VIDEOMME_SUBTITLES.items():
        path = root / "videomme/subtitle" / f"{video_id}.srt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_srt(cues))
    _parquet(root / "longvideobench/validation-00000-of-00001.parquet", LVB_ROWS)
    subs = root / "longvideobench/subtitles"
    subs.mkdir(parents=True, exist_ok=True)
    (subs / "fxLvbA0001_en.json").write_text(
        json.dumps([{"start": "00:00:01.000", "end": "00:00:03.000", "line": "A red circle."}])
    )
    (root / "lvbench").mkdir(parents=True, exist_ok=True)
    (root / "lvbench/video_info.meta.jsonl").write_text("".join(json.dumps(r) + "\n" for r in LVBENCH_META))
    _parquet(root / "mlvu/test-00000-of-00001.parquet", MLVU_ROWS)
    (root / "mmvu").mkdir(parents=True, exist_ok=True)
    (root / "mmvu/validation.json").write_text(json.dumps(MMVU_ROWS, indent=1))
    schema = pa.schema(
        [("video", pa.string()), ("caption", pa.string()), ("timestamp", pa.list_(pa.float16()))]
    )
    rows = [{**r, "timestamp": [_half(v) for v in r["timestamp"]]} for r in CHARADES_ROWS]
    _parquet(root / "charades/data/test-00000-of-00001.parquet", rows, schema)


def _half(value: float):
    import numpy as np

    return np.float16(value)


def entries(root: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """``benchmarks`` config entries for the fixtures under ``root`` (every registry benchmark); with
    ``root="."`` the paths are relative (as the manifest stores them)."""
    r = Path(root)
    return [
        {"name": "synthetic", "source": str(r / "synthetic/eval"), "media_root": str(r / "synthetic/media")},
        {"name": "videomme", "source": str(r / "videomme/videomme"), "media_root": str(r / "videomme")},
        {
            "name": "videomme_wsub",
            "source": str(r / "videomme/videomme"),
            "media_root": str(r / "videomme"),
            "subtitles": str(r / "videomme/subtitle"),
        },  # fmt: skip
        {
            "name": "longvideobench",
            "source": str(r / "longvideobench"),
            "media_root": str(r / "longvideobench"),
        },
        {"name": "lvbench", "source": str(r / "lvbench"), "media_root": str(r / "lvbench")},
        {"name": "mlvu", "source": str(r / "mlvu"), "media_root": str(r / "mlvu")},
        {"name": "mmvu", "source": str(r / "mmvu"), "media_root": str(r / "mmvu")},
        {"name": "charades", "source": str(r / "charades/data"), "media_root": str(r / "charades")},
    ]


def write_fixtures(root: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Write (once) every fixture benchmark under ``root``; returns their config entries."""
    r = Path(root).resolve()
    if not (r / MARKER).exists():
        r.mkdir(parents=True, exist_ok=True)
        _write_rows(r)
        written: dict[tuple[str, ...], Path] = {}
        for bench, videos in VIDEOS.items():
            for rel, events in videos:
                path = r / bench / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                key = tuple(e.label for e in events)
                if key in written:  # same schedule: copy the bytes instead of encoding again
                    path.write_bytes(written[key].read_bytes())
                else:
                    write_video(path, list(events), SECONDS, FPS, SIZE)
                    written[key] = path
        result = synthesize(str(r / "synthetic"), videos=4, seconds=SECONDS, seed=0, fps=FPS)
        for archive in result.archives:  # archives we wrote ourselves: plain extraction
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(r / "synthetic/media")
        (r / DEMO_MANIFEST).write_text(json.dumps(entries("."), indent=1) + "\n")  # relative paths
        (r / MARKER).write_text("ok\n")
    return entries(r)
