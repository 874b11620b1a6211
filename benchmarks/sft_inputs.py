"""SFT input pipeline: rows -> model-ready batches per second, ours vs the release's strategy, in one run.

- ours: ``paravt_core.sft.inputs.encode_row`` (exact seek-based frames from ``paravt_core.video``, resized in
  the decoder, true timestamps; the processor keeps the frames as they are) and the first-fit
  ``Packer`` into sequences of ``--packing-length`` tokens, then ``pack``.
- release: per row ``qwen_vl_utils.process_vision_info`` (its torchcodec reader with its defaults, bicubic
  resize of the decoded frames), then the processor on that row, then pad-to-longest batches of
  ``--batch-size`` rows. Both apply the same label masking, so the difference is media handling and
  batching.

Both sample 1 fps, at most 64 frames, 784..50176 px per frame (docs/method.md §6), in one process with one intra-op
thread. Rows: the ParaVT SFT format (agentic system prompt with the tool block, a video, parallel
``crop_video`` calls, tool responses, an answer) over 1-10 min videos (640x360, 30 fps, x264 defaults, GOP
250; made by ffmpeg once and cached in ``~/.cache/paravt-bench``). The tokenizer and processor are the tiny
model's (same patch 16 / merge 2 geometry as Qwen3-VL, so the vision token counts are the real ones).

Padding: "pad tokens" is the share of computed tokens that are padding (0 for packed sequences, which are
run unpadded); "padding share" is, for ours, the part of the ``--packing-length`` capacity left empty (what
a fixed-shape batch would pad; the trainer logs the same number) and, for the release, its pad tokens. qwen-vl-utils is not a project dependency::

    .venv/bin/pip install --target .venv-bench/site --no-deps qwen-vl-utils==0.0.14
    PYTHONPATH=.venv-bench/site .venv/bin/python benchmarks/sft_inputs.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from paravt_core.agent import prompts  # noqa: E402
from paravt_core.models import build_tiny_model, load  # noqa: E402
from paravt_core.sft.inputs import MediaSpec, assistant_labels, encode_row, parse_messages  # noqa: E402
from paravt_core.sft.packing import IGNORE, Packer, pack  # noqa: E402

CACHE_DIR = Path(os.environ.get("PARAVT_BENCH_CACHE", Path.home() / ".cache" / "paravt-bench"))
MINUTES = [1, 3, 6, 10]
QUICK_MINUTES = [1, 2]
SPEC = MediaSpec()  # 1 fps, 4..64 frames, 784..50176 px
console = Console(width=None if sys.stdout.isatty() else 140)


def ensure_video(minutes: int) -> Path:
    path = CACHE_DIR / f"sft_640x360_{minutes}min.mp4"
    if path.exists():
        return path
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.mp4")
    cmd = ["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi"]
    cmd += ["-i", f"testsrc2=size=640x360:rate=30:duration={minutes * 60}"]
    cmd += ["-c:v", "libx264", "-g", "250", "-pix_fmt", "yuv420p", str(tmp)]
    console.print(f"encoding {path} (once, then cached) ...")
    subprocess.run(cmd, check=True)
    tmp.rename(path)
    return path


def _call(name: str, a: float, b: float) -> str:
    args = {"video_path": name, "start_time": a, "end_time": b}
    return "<tool_call>\n" + json.dumps({"name": "crop_video", "arguments": args}) + "\n</tool_call>"


def make_row(video: Path, seconds: float, k: int) -> list[dict]:
    """One ParaVT-style SFT conversation: 2-5 parallel crops, then (every other row) a zoom-in round."""
    text = lambda t: {"type": "text", "text": t}  # noqa: E731
    calls = 2 + k % 4
    edges = [round(seconds * i / calls, 1) for i in range(calls + 1)]
    rounds = [list(zip(edges[:-1], edges[1:], strict=True))]
    if k % 2:
        rounds.append([(edges[1], round(edges[1] + seconds / 10, 1))])
    question = f"Question {k}: when does the moving pattern change colour? Answer as 'start, end'."
    messages = [
        {"role": "system", "content": [text(prompts.system_prompt("agentic_general"))]},
        {
            "role": "user",
            "content": [
                {"type": "video_url", "video_url": {"url": str(video)}},
                text(prompts.load_prompt_set().question_with_suffix(question, video.name)),
            ],
        },
    ]
    for r, windows in enumerate(rounds):
        think = f"<think>Round {r + 1}: I will inspect {len(windows)} segment(s) of the video.</think>\n"
        responses = "\n".join(
            f"<tool_response>\nSegment {a}-{b} s: a test pattern with a moving gradient and a counter.\n"
            "</tool_response>"
            for a, b in windows
        )
        calls_text = "\n".join(_call(video.name, a, b) for a, b in windows)
        messages += [
            {"role": "assistant", "content": [text(think + calls_text)]},
            {"role": "user", "content": [text(responses)]},
        ]
    final = f"<think>The change is in segment {1 + k % calls}.</think>\n<answer>{k}.0, {k + 3}.0</answer>"
    messages.append({"role": "assistant", "content": [text(final)]})
    return messages


# ------------------------------------------------------------------------------------------ the two paths


def _cpu() -> float:
    """CPU seconds of this process, all threads (decoder threads included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def ours(rows: list[list[dict]], processor, config, packing_length: int) -> dict:
    packer = Packer(packing_length)
    sequences = []
    start, cpu = time.perf_counter(), _cpu()
    for i, row in enumerate(rows):
        sample = encode_row(row, processor, config, SPEC, index=i)
        sequences += [pack(b) for b in packer.add(sample)]
    sequences += [pack(b) for b in packer.flush()]
    seconds, cpu = time.perf_counter() - start, _cpu() - cpu
    tokens = sum(s.tokens for s in sequences)
    assert tokens == sum(sum(s.lengths) for s in sequences)  # packed sequences carry no pad token
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "rows_per_s": len(rows) / seconds,
        "rows_per_cpu_s": len(rows) / cpu,
        "tokens": tokens,
        "batches": len(sequences),
        "pad_tokens_share": 0.0,
        "padding_share": 1 - tokens / (len(sequences) * packing_length),
    }


def release(rows: list[list[dict]], processor, batch_size: int) -> dict:
    from qwen_vl_utils import process_vision_info

    pad_id = processor.tokenizer.pad_token_id
    start, cpu = time.perf_counter(), _cpu()
    encoded = []
    for row in rows:
        messages = parse_messages(row)
        for m in messages:  # the release's video element, with docs/method.md §6's sampling
            for part in m["content"]:
                if part["type"] == "video":
                    part.update(
                        fps=SPEC.video_fps,
                        max_frames=SPEC.video_max_frames,
                        min_pixels=SPEC.video_min_pixels,
                        max_pixels=SPEC.video_max_pixels,
                    )
        text = processor.apply_chat_template(messages, tokenize=False)
        images, videos, kwargs = process_vision_info(
            messages, return_video_kwargs=True, return_video_metadata=True, image_patch_size=16
        )
        frames, metadata = zip(*videos, strict=True)
        out = processor(
            text=[text],
            images=images,
            videos=list(frames),
            video_metadata=list(metadata),
            do_resize=False,
            return_tensors="pt",
            return_offsets_mapping=True,
            **kwargs,
        )
        ids = out["input_ids"][0]
        labels = assistant_labels(
            ids, out["offset_mapping"][0], out["mm_token_type_ids"][0], processor.tokenizer
        )
        encoded.append((ids, labels, out["pixel_values_videos"], out["video_grid_thw"]))
    batches = []
    for b in range(0, len(encoded), batch_size):
        group = encoded[b : b + batch_size]
        width = max(len(ids) for ids, *_ in group)
        input_ids = torch.full((len(group), width), pad_id)
        labels = torch.full((len(group), width), IGNORE)
        mask = torch.zeros((len(group), width), dtype=torch.long)
        for j, (ids, lab, _, _) in enumerate(group):
            input_ids[j, : len(ids)], labels[j, : len(ids)], mask[j, : len(ids)] = ids, lab, 1
        pixels = torch.cat([g[2] for g in group])
        grids = torch.cat([g[3] for g in group])
        batches.append((input_ids, labels, mask, pixels, grids))
    seconds, cpu = time.perf_counter() - start, _cpu() - cpu
    real = sum(int(b[2].sum()) for b in batches)
    total = sum(b[0].numel() for b in batches)
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "rows_per_s": len(rows) / seconds,
        "rows_per_cpu_s": len(rows) / cpu,
        "tokens": real,
        "batches": len(batches),
        "pad_tokens_share": 1 - real / total,
        "padding_share": 1 - real / total,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1-2 min videos, fewer rows")
    parser.add_argument("--rows-per-video", type=int, default=3)
    parser.add_argument("--packing-length", type=int, default=8192)
    parser.add_argument("--batch-size", type=int, default=4, help="rows per padded batch (release)")
    parser.add_argument("--out", default="benchmarks/results/sft_inputs.json")
    args = parser.parse_args()

    videos = [(m, ensure_video(m)) for m in (QUICK_MINUTES if args.quick else MINUTES)]
    rows = [
        make_row(path, m * 60.0, k=len(videos) * j + i)
        for j in range(args.rows_per_video)
        for i, (m, path) in enumerate(videos)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        loaded = load(build_tiny_model(tmp))
    processor, config = loaded.processor, loaded.config

    # warm-up (imports, first decoder open) on one row each, not timed
    ours(rows[:1], processor, config, args.packing_length)
    try:
        release(rows[:1], processor, args.batch_size)
        have_release = True
    except ImportError:
        have_release = False
        console.print("qwen-vl-utils is not installed: release column missing (see the module docstring)")

    result = {
        "rows": len(rows),
        "videos_min": [m for m, _ in videos],
        "omp_threads": os.environ["OMP_NUM_THREADS"],
    }
    result["ours"] = ours(rows, processor, config, args.packing_length)
    if have_release:
        result["release"] = release(rows, processor, args.batch_size)
        result["ratio_rows_per_s"] = result["ours"]["rows_per_s"] / result["release"]["rows_per_s"]
        result["ratio_rows_per_cpu_s"] = (
            result["ours"]["rows_per_cpu_s"] / result["release"]["rows_per_cpu_s"]
        )

    table = Table(
        title=f"SFT inputs: {len(rows)} rows over {', '.join(f'{m} min' for m, _ in videos)} videos"
    )
    columns = (
        "path",
        "rows/s",
        "rows/CPU-s",
        "wall s",
        "CPU s",
        "tokens",
        "batches",
        "pad tokens",
        "padding share",
    )
    for col in columns:
        table.add_column(col, justify="right")
    for name in ("ours", "release"):
        if name in result:
            r = result[name]
            label = (
                f"ours (packed {args.packing_length})"
                if name == "ours"
                else f"release (pad, bs {args.batch_size})"
            )
            table.add_row(
                label,
                f"{r['rows_per_s']:.2f}",
                f"{r['rows_per_cpu_s']:.2f}",
                f"{r['seconds']:.1f}",
                f"{r['cpu_seconds']:.1f}",
                str(r["tokens"]),
                str(r["batches"]),
                f"{r['pad_tokens_share']:.1%}",
                f"{r['padding_share']:.1%}",
            )
    console.print(table)
    if have_release:
        console.print(
            f"ours / release: {result['ratio_rows_per_s']:.2f}x rows per second (wall), "
            f"{result['ratio_rows_per_cpu_s']:.2f}x rows per CPU-second; padding "
            f"{result['ours']['padding_share']:.1%} vs {result['release']['padding_share']:.1%}"
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
