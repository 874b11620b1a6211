"""The ground truth of a synthetic dataset: ``manifest.json`` and the paths a run wrote."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from paravt_core.data.schema import bucket_of
from paravt_core.synth.scenes import frame_count

GENERATOR = "paravt synth"
MANIFEST_VERSION = 1


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


def is_synth_output(out: Path) -> bool:
    """True when ``out`` holds a complete earlier ``paravt synth`` output (its manifest, written last)."""
    manifest = out / "manifest.json"
    try:
        return json.loads(manifest.read_text()).get("generator") == GENERATOR
    except (OSError, ValueError, AttributeError):
        return False


def prepare_out(out: Path, force: bool = False) -> None:
    """Refuse a non-empty directory that is not an earlier ``paravt synth`` output (unless ``force``); replace
    only what synth writes."""
    ours = ("source", "parquet", "eval", "manifest.json")
    manifest = out / "manifest.json"
    foreign = [p.name for p in out.iterdir() if not p.name.startswith(".synth-")] if out.is_dir() else []
    if not force and foreign and not is_synth_output(out):
        raise FileExistsError(
            f"{out} is not empty and holds files not written by `paravt synth`; choose an empty directory "
            "or pass --force to write into it"
        )
    if manifest.exists():
        manifest.unlink()  # written last: its absence marks the output as incomplete while we rewrite
    for p in ours[:3]:
        shutil.rmtree(out / p, ignore_errors=True)


def load_manifest(out_dir: str | Path) -> dict:
    """The ground truth of an earlier :func:`synthesize` run."""
    return json.loads((Path(out_dir) / "manifest.json").read_text())


def build_manifest(
    out: Path,
    *,
    seed: int,
    fps: float,
    size: tuple[int, int],
    seconds: float,
    plan: list[dict],
    images: list[dict],
    archives: dict[str, list[str]],
    parquets: dict[str, list[Path]],
) -> dict:
    """The ground truth of one run: every video with its events, images, archive members and parquets
    (with their row counts, read back from the written files)."""
    return {
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
            kind: [p.relative_to(out).as_posix() for p in paths] for kind, paths in parquets.items()
        },
        "rows": {
            p.relative_to(out).as_posix(): pq.ParquetFile(p).metadata.num_rows
            for paths in parquets.values()
            for p in paths
        },
    }


def write_manifest(out: Path, manifest: dict) -> None:
    """Written last and atomically: its presence marks a complete output."""
    tmp = out / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2))
    os.replace(tmp, out / "manifest.json")
