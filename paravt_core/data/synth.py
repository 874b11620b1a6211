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

import json
import math
import os
import random
import shutil
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from rich.progress import Progress

from paravt_core.data import synth_rows as rows
from paravt_core.data.schema import SFT_SPLITS, bucket_of, count_tag
from paravt_core.data.synth_video import COLOURS, SHAPES, Event, frame_count, render_image, write_video

GENERATOR = "paravt synth"
MANIFEST_VERSION = 1
EVAL_FILE = "synthetic_eval.parquet"
IMAGE_DIRS = ("Chart", "Math", "Knowledge", "OCR")
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # fixed member timestamps keep archives byte-identical across runs
_GRID = 0.5  # event boundaries lie on this grid (seconds)


@dataclass(frozen=True)
class Slot:
    """Where a video of one source lives: its sentinel directory, its archive and the SFT split it feeds."""

    name: str
    split: str | None  # SFT split that prefers these videos (selfqa feeds RL only)

    def directory(self, r: int) -> str:
        return {
            "charades": "museg/charades",
            "et_instruct": "museg/et_instruct_164k",
            "selfqa": "selfqa",
        }.get(self.name, f"longvt_source/{self.name}_{r}")

    def archive(self, r: int, part: int = 1) -> str:
        if self.name in ("charades", "et_instruct"):
            return f"museg/{self.name}_{r}.zip"
        if self.name == "selfqa":
            return "selfqa/selfqa.zip"
        if self.name == "longvideoreason":
            return f"longvt_source/{self.name}_{r}_part{part}.zip"
        return f"longvt_source/{self.name}_{r}.zip"


SLOTS: tuple[Slot, ...] = (
    Slot("videor1", "videor1"),
    Slot("charades", "charades"),
    Slot("et_instruct", "museg"),
    Slot("selfqa", None),
    Slot("longvideoreason", "longvideoreason"),
    Slot("tvg", "tvg"),
    Slot("geminicot", "geminicot"),
    Slot("selftrace", "selftrace"),
)
VIDEOR1_SUBDIRS = ("CLEVRER", "LLaVA-Video-178K", "NeXT-QA")


@dataclass
class SynthResult:
    """Paths written by :func:`synthesize` (all local) and the ground-truth manifest."""

    out_dir: Path
    manifest: dict
    archives: list[Path] = field(default_factory=list)
    sft_parquets: list[Path] = field(default_factory=list)
    rl_parquets: list[Path] = field(default_factory=list)
    eval_parquet: Path | None = None

    @property
    def source_dir(self) -> Path:
        return self.out_dir / "source"

    @property
    def parquet_dir(self) -> Path:
        return self.out_dir / "parquet"

    @property
    def eval_dir(self) -> Path:
        return self.out_dir / "eval"

    @property
    def manifest_path(self) -> Path:
        return self.out_dir / "manifest.json"

    @property
    def videos(self) -> list[dict]:
        return self.manifest["videos"]

    def summary(self) -> str:
        lines = [f"synthetic ParaVT data in {self.out_dir}"]
        lines.append(f"  videos:   {len(self.videos)} ({len(self.manifest['images'])} images)")
        lines.append(f"  archives: {len(self.archives)} under {self.source_dir}")
        for a in self.archives:
            rel = a.relative_to(self.source_dir).as_posix()
            lines.append(f"    {rel}  ({len(self.manifest['archives'][rel])} members)")
        lines.append(
            f"  parquets: {len(self.sft_parquets)} SFT + {len(self.rl_parquets)} RL under {self.parquet_dir}"
        )
        for p in [*self.sft_parquets, *self.rl_parquets]:
            lines.append(f"    {p.name}")
        lines.append(f"  eval:     {self.eval_parquet}")
        lines.append(f"  manifest: {self.manifest_path}")
        return "\n".join(lines)


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


def _name(slot: Slot, i: int, r: int, rng: random.Random) -> str:
    """A file name in the style of the source: Charades ids, YouTube ids, UUIDs, LongVT sub-datasets."""
    alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    yt = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
    if slot.name == "charades":
        return "".join(rng.choice(alnum) for _ in range(5)) + ".mp4"
    if slot.name == "selfqa":
        h = f"{rng.getrandbits(128):032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}.mp4"
    if slot.name == "videor1":
        return f"{VIDEOR1_SUBDIRS[r % len(VIDEOR1_SUBDIRS)]}/video_{i:04d}.mp4"
    return "v_" + "".join(rng.choice(yt) for _ in range(11)) + ".mp4"


# ---------------------------------------------------------------- writers


def _write_zip(path: Path, members: list[tuple[str, Path]]) -> None:
    """Stored (no compression: mp4/png are already compressed), sorted, fixed timestamps, 0644."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as zf:
        for arcname, src in sorted(members):
            info = zipfile.ZipInfo(arcname, date_time=_ZIP_DATE)
            info.external_attr = 0o100644 << 16
            info.create_system = 3  # unix, so the mode bits above are meaningful
            zf.writestr(info, src.read_bytes())
    os.replace(tmp, path)


def _write_parquet(path: Path, table: pa.Table) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


SFT_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("source", pa.string()),
        ("messages", pa.string()),
        ("video_duration", pa.float64()),
    ]
)
RL_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("videos", pa.list_(pa.struct([("video", pa.string())]))),
        (
            "extra_info",
            pa.struct(
                [
                    ("answer", pa.string()),
                    ("question_type", pa.string()),
                    ("index", pa.int64()),
                    ("split", pa.string()),
                ]
            ),
        ),
    ]
)
EVAL_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("video", pa.string()),
        ("question", pa.string()),
        ("options", pa.list_(pa.string())),
        ("answer", pa.string()),
        ("question_type", pa.string()),
        ("duration", pa.float64()),
        ("data_source", pa.string()),
    ]
)


def _prepare_out(out: Path) -> None:
    """Refuse to mix with foreign files; replace only what an earlier ``paravt synth`` run wrote."""
    ours = ("source", "parquet", "eval", "manifest.json")
    manifest = out / "manifest.json"
    previous = manifest.exists() and json.loads(manifest.read_text()).get("generator") == GENERATOR
    if not previous and any((out / p).exists() for p in ours):
        raise FileExistsError(
            f"{out} already holds data not written by `paravt synth`; choose an empty directory"
        )
    if manifest.exists():
        manifest.unlink()  # written last: its absence marks the output as incomplete while we rewrite
    for p in ours[:3]:
        shutil.rmtree(out / p, ignore_errors=True)


def synthesize(
    out_dir: str,
    videos: int = 8,
    seconds: float = 12.0,
    seed: int = 0,
    fps: float = 4,
    size: tuple[int, int] = (160, 128),
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
    _prepare_out(out)

    # Plan: every random draw comes from a per-purpose RNG seeded by strings, so adding a video or a row
    # never changes the others.
    plan: list[dict] = []
    for i in range(videos):
        slot, r = SLOTS[i % len(SLOTS)], i // len(SLOTS)
        rng = random.Random(f"{seed}/video/{i}")
        events = make_schedule(rng, seconds, size)
        path = f"{slot.directory(r)}/{_name(slot, i, r, rng)}"
        plan.append({"i": i, "slot": slot, "round": r, "path": path, "events": events})
    _assign_archives(plan)
    images = _plan_images(plan, seed, size)

    with tempfile.TemporaryDirectory(prefix=".synth-", dir=out) as work_s:
        work = Path(work_s)
        _render_all(plan, images, work, seconds, fps, size)
        archives = _write_archives(out / "source", plan, images, work)

    vids = [rows.Video(p["path"], float(seconds), tuple(p["events"])) for p in plan]
    sft_paths = _write_sft(out / "parquet", plan, vids, images, seed)
    rl_paths = [_write_rl(out / "parquet", plan, vids, seed)]
    eval_path = _write_eval(out / "eval", vids, seed)

    manifest = {
        "generator": GENERATOR,
        "version": MANIFEST_VERSION,
        "seed": seed,
        "fps": fps,
        "size": list(size),
        "seconds": seconds,
        "videos": [
            {
                "id": f"v{p['i']:03d}",
                "path": p["path"],
                "bucket": bucket_of(p["path"]),
                "source": p["slot"].name,
                "archive": p["archive"],
                "duration": float(seconds),
                "fps": fps,
                "frames": frame_count(seconds, fps),
                "width": size[0],
                "height": size[1],
                "events": [e.to_json() for e in p["events"]],
            }
            for p in plan
        ],
        "images": [{**im, "bbox": list(im["bbox"])} for im in images],
        "archives": archives,
        "parquets": {
            "sft": [p.relative_to(out).as_posix() for p in sft_paths],
            "rl": [p.relative_to(out).as_posix() for p in rl_paths],
            "eval": [eval_path.relative_to(out).as_posix()],
        },
    }
    tmp = out / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2))
    os.replace(tmp, out / "manifest.json")
    return SynthResult(
        out_dir=out,
        manifest=manifest,
        archives=[out / "source" / a for a in sorted(archives)],
        sft_parquets=sft_paths,
        rl_parquets=rl_paths,
        eval_parquet=eval_path,
    )


def load_manifest(out_dir: str | Path) -> dict:
    """The ground truth of an earlier :func:`synthesize` run."""
    return json.loads((Path(out_dir) / "manifest.json").read_text())


def _assign_archives(plan: list[dict]) -> None:
    """Archive of every video; longvideoreason directories are split over ``_part1`` / ``_part2``."""
    by_dir: dict[str, list[dict]] = {}
    for p in plan:
        by_dir.setdefault(p["slot"].directory(p["round"]), []).append(p)
    for p in plan:
        part = 1
        if p["slot"].name == "longvideoreason":
            same = by_dir[p["slot"].directory(p["round"])]
            part = 1 if same.index(p) < (len(same) + 1) // 2 else 2
        p["archive"] = p["slot"].archive(p["round"], part)


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


def _write_archives(source: Path, plan: list[dict], images: list[dict], work: Path) -> dict[str, list[str]]:
    members: dict[str, list[str]] = {}
    for item in [*plan, *images]:
        members.setdefault(item["archive"], []).append(item["path"])
    for archive, paths in members.items():
        _write_zip(source / archive, [(m, work / m) for m in paths])
    return {a: sorted(m) for a, m in sorted(members.items())}


def _sft_candidates(split: str, plan: list[dict], vids: list[rows.Video]) -> list[rows.Video]:
    own = [v for p, v in zip(plan, vids, strict=True) if p["slot"].split == split]
    return own or vids


def _write_sft(
    pq_dir: Path, plan: list[dict], vids: list[rows.Video], images: list[dict], seed: int
) -> list[Path]:
    paths = []
    for split in SFT_SPLITS:
        cands = _sft_candidates(split, plan, vids)
        families = rows.SFT_FAMILIES[split]
        system = rows.TOOL_ENVELOPE if split == "charades" else rows.AGENT_SYSTEM_PROMPT
        records: list[dict] = []
        n_rows = max(6, 2 * len(cands))
        for j in range(n_rows):
            v = cands[j % len(cands)]
            rng = random.Random(f"{seed}/sft/{split}/{j}")
            q = families[j % len(families)](v, rng)
            msgs = rows.sft_messages(v, q, system, style=j % 4)
            records.append(_sft_record(f"{split}-{j:05d}", split, msgs, v.duration))
        if split == "videor1":
            records += _videor1_image_rows(images, vids, system, len(records))
        table = pa.Table.from_pylist(records, schema=SFT_SCHEMA)
        path = pq_dir / f"paravt_sft_{split}_{count_tag(len(records))}.parquet"
        _write_parquet(path, table)
        paths.append(path)
    return paths


def _sft_record(row_id: str, split: str, msgs: list[dict], duration: float | None) -> dict:
    return {"id": row_id, "source": split, "messages": json.dumps(msgs), "video_duration": duration}


def _videor1_image_rows(images: list[dict], vids: list[rows.Video], system: str, start: int) -> list[dict]:
    """Image-only rows (no tools) and one interleaved image + video grounding row per videor1 round."""
    by_path = {v.path: v for v in vids}
    out = []
    for im in images:
        msgs = rows.image_messages(im["path"], im["colour"], im["shape"])
        out.append(_sft_record(f"videor1-{start + len(out):05d}", "videor1", msgs, None))
        if im["path"].endswith("img_000.png"):
            v = by_path[im["video"]]
            k = next(i for i, e in enumerate(v.events) if (e.shape, e.colour) == (im["shape"], im["colour"]))
            q = rows.image_video_question(v, k)
            msgs = rows.sft_messages(v, q, system, style=2, image=im["path"])
            out.append(_sft_record(f"videor1-{start + len(out):05d}", "videor1", msgs, v.duration))
    return out


def _rl_data_source(slot: Slot, i: int, qtype: str) -> str:
    """Names in the spirit of the release's RL mix (Charades grounding, HACS / Ego4D-NaQ QA, ...)."""
    if slot.name == "charades" and qtype == "tvg":
        return "charades_tvg"
    if slot.name == "selfqa" and qtype == "oe":
        return ("hacs", "ego4d_naq")[i % 2]
    return f"synthetic_{slot.name}_{qtype}"


def _write_rl(pq_dir: Path, plan: list[dict], vids: list[rows.Video], seed: int) -> Path:
    records = []
    for p, v in zip(plan, vids, strict=True):
        for family in (rows.q_which_at, rows.q_when, rows.q_colour_after):
            rng = random.Random(f"{seed}/rl/{p['i']}/{family.__name__}")
            q = family(v, rng)
            idx = len(records)
            records.append(
                {
                    "id": f"rl-{idx:05d}",
                    "data_source": _rl_data_source(p["slot"], p["i"], q.qtype),
                    "prompt": [{"role": "user", "content": f"<video>\n{q.text}"}],
                    "videos": [{"video": v.path}],
                    "extra_info": {
                        "answer": q.gold,
                        "question_type": q.qtype,
                        "index": idx,
                        "split": "train",
                    },
                }
            )
    path = pq_dir / f"paravt_rl_diverse_{count_tag(len(records))}.parquet"
    _write_parquet(path, pa.Table.from_pylist(records, schema=RL_SCHEMA))
    return path


def _write_eval(eval_dir: Path, vids: list[rows.Video], seed: int) -> Path:
    records = []
    for i, v in enumerate(vids):
        for family in (rows.q_which_at, rows.q_when):
            q = family(v, random.Random(f"{seed}/eval/{i}/{family.__name__}"))
            records.append(
                {
                    "id": f"eval-{len(records):05d}",
                    "video": v.path,
                    "question": q.text,
                    "options": q.options,
                    "answer": q.gold,
                    "question_type": q.qtype,
                    "duration": v.duration,
                    "data_source": "synthetic",
                }
            )
    path = eval_dir / EVAL_FILE
    _write_parquet(path, pa.Table.from_pylist(records, schema=EVAL_SCHEMA))
    return path
