"""Where synthetic videos live: the ParaVT-Source layout (sentinel directories, archive names) and the
zips themselves (stored, sorted, fixed timestamps, so the same seed gives the same bytes)."""

from __future__ import annotations

import os
import random
import zipfile
from dataclasses import dataclass
from pathlib import Path

_ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # fixed member timestamps keep archives byte-identical across runs


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


def file_name(slot: Slot, i: int, r: int, rng: random.Random) -> str:
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


def write_zip(path: Path, members: list[tuple[str, Path]]) -> None:
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


def assign_archives(plan: list[dict]) -> None:
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


def write_archives(source: Path, plan: list[dict], images: list[dict], work: Path) -> dict[str, list[str]]:
    members: dict[str, list[str]] = {}
    for item in [*plan, *images]:
        members.setdefault(item["archive"], []).append(item["path"])
    for archive, paths in members.items():
        write_zip(source / archive, [(m, work / m) for m in paths])
    return {a: sorted(m) for a, m in sorted(members.items())}
