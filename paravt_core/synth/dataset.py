"""Synthetic ParaVT data: real H.264 videos with known events, sentinel-path zips and release-schema parquets.

Usage::

    paravt synth OUT_DIR [--videos 8] [--seconds 12] [--seed 0]

or from Python ``synthesize(out_dir, videos=8, seconds=12.0, seed=0, fps=4, size=(160, 128))``.

Each video is a plain grey background on which coloured shapes (``red circle``, ``blue square``, …) appear
one at a time during known, non-overlapping windows ``[start, end)`` on a 0.5 s grid, so questions like
"which shape is visible at 5.0 s", "when does the blue square appear" (``3.0, 5.0``) or "what colour is the
shape after the circle" are answerable from the pixels. The output mirrors the two Hugging Face repos::

    OUT/source/    like ParaVT/ParaVT-Source: zips whose members carry full sentinel paths
                   longvt_source/videor1_0.zip, longvt_source/videor1_0_images.zip,
                   longvt_source/{longvideoreason_0_part1,tvg_0,geminicot_0,selftrace_0}.zip,
                   museg/charades_0.zip, museg/et_instruct_0.zip, selfqa/selfqa.zip
    OUT/parquet/   like ParaVT/ParaVT-Parquet: paravt_sft_<split>_<n>.parquet (7 splits), paravt_rl_diverse_<n>.parquet
    OUT/eval/      synthetic_eval.parquet (MCQ + grounding items, sentinel video paths, gold answers)
    OUT/manifest.json   ground truth: per video its sentinel path, archive, duration, fps, frames, events

Videos are assigned round-robin to eight source slots (videor1, charades, et_instruct, selfqa first, so any
``videos >= 4`` covers all four sentinel buckets); the k-th pass over the slots uses archive index k.
Everything is deterministic given the seed (bit-exact ffmpeg flags, fixed zip timestamps).
"""

from __future__ import annotations

import math
import os
import random
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.progress import Progress

from paravt_core.synth import rows
from paravt_core.synth.archives import SLOTS, assign_archives, file_name, write_archives
from paravt_core.synth.manifest import SynthResult, build_manifest, prepare_out, write_manifest
from paravt_core.synth.scenes import COLOURS, SHAPES, Event, render_image, write_video
from paravt_core.synth.tables import write_eval, write_rl, write_sft

IMAGE_DIRS = ("Chart", "Math", "Knowledge", "OCR")
_GRID = 0.5  # event boundaries lie on this grid (seconds)


# ---------------------------------------------------------------- schedules


def make_schedule(rng: random.Random, seconds: float, size: tuple[int, int]) -> list[Event]:
    """Non-overlapping events, one per equal time slot, each >= 1 s long, ending >= 0.5 s before its slot
    ends (so consecutive shapes never touch); distinct colours, so every label is unique in a video."""
    width, height = size
    n = max(2, min(len(COLOURS), int(seconds // 3)))  # slots of >= 2.5 s when seconds >= 5
    colours = rng.sample(sorted(COLOURS), n)
    events = []
    for k in range(n):
        # Slot k is [k*L, (k+1)*L) with L = seconds / n; work in whole grid steps to avoid float drift.
        lo = math.ceil(round(seconds * k / n / _GRID, 6))  # first grid point at or after the slot start
        hi = math.floor(round(seconds * (k + 1) / n / _GRID, 6)) - 1  # one step of gap before the next slot
        steps = hi - lo
        if steps < 2:
            raise ValueError(f"{seconds} s is too short for {n} events of >= 1 s each")
        dur_steps = rng.randint(2, steps)
        start = _GRID * (lo + rng.randint(0, steps - dur_steps))
        side = int(min(width, height) * rng.uniform(0.55, 0.75))
        x0 = rng.randint(2, width - side - 2)
        y0 = rng.randint(2, height - side - 2)
        events.append(
            Event(
                shape=rng.choice(SHAPES),
                colour=colours[k],
                start=start,
                end=start + _GRID * dur_steps,
                bbox=(x0, y0, x0 + side, y0 + side),
            )
        )
    return events


def synthesize(
    out_dir: str,
    videos: int = 8,
    seconds: float = 12.0,
    seed: int = 0,
    fps: float = 4,
    size: tuple[int, int] = (160, 128),
    force: bool = False,
) -> SynthResult:
    """Write synthetic videos, sentinel-path zips, SFT/RL/eval parquets and a ground-truth manifest."""
    if "://" in out_dir:
        raise ValueError(f"synthesize writes to a local directory, got {out_dir!r}; upload it afterwards")
    if videos < 4:
        raise ValueError(f"videos must be >= 4 to cover the four sentinel buckets, got {videos}")
    if seconds < 5:
        raise ValueError(f"seconds must be >= 5 (room for two events of >= 1 s with gaps), got {seconds}")
    size = (int(size[0]), int(size[1]))
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    prepare_out(out, force=force)

    # Plan: every random draw comes from a per-purpose RNG seeded by strings, so adding a video or a row
    # never changes the others.
    plan: list[dict] = []
    for i in range(videos):
        slot, r = SLOTS[i % len(SLOTS)], i // len(SLOTS)
        rng = random.Random(f"{seed}/video/{i}")
        events = make_schedule(rng, seconds, size)
        path = f"{slot.directory(r)}/{file_name(slot, i, r, rng)}"
        plan.append({"i": i, "slot": slot, "round": r, "path": path, "events": events})
    assign_archives(plan)
    images = _plan_images(plan, seed, size)

    with tempfile.TemporaryDirectory(prefix=".synth-", dir=out) as work_s:
        work = Path(work_s)
        _render_all(plan, images, work, seconds, fps, size)
        archives = write_archives(out / "source", plan, images, work)

    vids = [rows.Video(p["path"], float(seconds), tuple(p["events"])) for p in plan]
    sft_paths = write_sft(out / "parquet", plan, vids, images, seed)
    rl_paths = [write_rl(out / "parquet", plan, vids, seed)]
    eval_path = write_eval(out / "eval", vids, seed)

    manifest = build_manifest(
        out,
        seed=seed,
        fps=fps,
        size=size,
        seconds=seconds,
        plan=plan,
        images=images,
        archives=archives,
        parquets={"sft": sft_paths, "rl": rl_paths, "eval": [eval_path]},
    )
    write_manifest(out, manifest)
    return SynthResult(
        out_dir=out,
        manifest=manifest,
        archives=[out / "source" / a for a in sorted(archives)],
        sft_parquets=sft_paths,
        rl_parquets=rl_paths,
        eval_parquet=eval_path,
    )


def _plan_images(plan: list[dict], seed: int, size: tuple[int, int]) -> list[dict]:
    """Still images beside each videor1_<r> video dir; image 0 shows a shape from that round's video."""
    images = []
    for p in plan:
        if p["slot"].name != "videor1":
            continue
        r = p["round"]
        rng = random.Random(f"{seed}/images/{r}")
        for j, sub in enumerate(IMAGE_DIRS):
            if j == 0:
                ev = p["events"][rng.randrange(len(p["events"]))]
                shape, colour = ev.shape, ev.colour
            else:
                shape, colour = rng.choice(SHAPES), rng.choice(sorted(COLOURS))
            side = int(min(size) * 0.6)
            x0, y0 = rng.randint(2, size[0] - side - 2), rng.randint(2, size[1] - side - 2)
            images.append(
                {
                    "path": f"longvt_source/videor1_{r}/{sub}/img_{j:03d}.png",
                    "archive": f"longvt_source/videor1_{r}_images.zip",
                    "shape": shape,
                    "colour": colour,
                    "rgb": list(COLOURS[colour]),
                    "bbox": (x0, y0, x0 + side, y0 + side),
                    "video": p["path"],
                }
            )
    return images


def _render_all(
    plan: list[dict], images: list[dict], work: Path, seconds: float, fps: float, size: tuple[int, int]
) -> None:
    for im in images:
        render_image(work / im["path"], im["shape"], im["colour"], im["bbox"], size)
    workers = max(1, min(2, os.cpu_count() or 1, len(plan)))
    with Progress(transient=True) as progress, ThreadPoolExecutor(workers) as pool:
        task = progress.add_task("encoding synthetic videos", total=len(plan))
        futures = [pool.submit(write_video, work / p["path"], p["events"], seconds, fps, size) for p in plan]
        for fut in futures:
            fut.result()
            progress.advance(task)
