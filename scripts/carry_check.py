"""Does the GPU carry import on the lent image? Every requirement of every carried package, resolved against
the carry itself and the image's package list, before any device time is spent.

    python scripts/carry_check.py                       # scripts/gpu_carry.txt's pins, metadata from the index
    python scripts/carry_check.py --site build/site     # the metadata of an installed site (gpu_carry.sh)
    python scripts/carry_check.py --site S --live       # on the lent machine: against what python3 really has

A requirement is met by the carried package of that name when its version satisfies it, else by the image:
by a recorded version that satisfies it, or by a package listed without a version only when the requirement
names no version (an unrecorded version proves nothing: that is how `typing-extensions>=4.14` met the image's
4.12.2 and every part died at import). Markers are evaluated for the image's CPython 3.12 on Linux x86_64, with
no extras. Exit 1 and one line per unmet requirement.

Written by hand: pip resolves one environment it installs into, not a site laid over another interpreter's
packages; `packaging` (in both environments) does the version and marker arithmetic.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
IMAGE = ROOT / "images" / "gpu-lending-image.txt"
CARRY = ROOT / "scripts" / "gpu_carry.txt"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux2014_x86_64")


@dataclass(frozen=True)
class Dist:
    name: str  # canonical
    version: str
    requires: tuple[str, ...]


def read_pins(path: Path) -> dict[str, str | None]:
    """``name[==version]`` lines (``#`` comments) -> {canonical name: version or None}."""
    out: dict[str, str | None] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[canonicalize_name(name)] = version.strip() or None
    return out


def image_environment(python: str) -> dict[str, str]:
    """The marker environment of the image's interpreter (CPython ``python`` on Linux x86_64)."""
    env = dict(default_environment())
    major_minor = ".".join(python.split(".")[:2])
    env.update(python_version=major_minor, python_full_version=python, implementation_name="cpython",
               platform_python_implementation="CPython", sys_platform="linux", platform_system="Linux",
               platform_machine="x86_64", os_name="posix", implementation_version=python)  # fmt: skip
    return env


def applies(requirement: Requirement, env: dict[str, str]) -> bool:
    return requirement.marker is None or requirement.marker.evaluate({**env, "extra": ""})


def unmet(carried: Iterable[Dist], image: dict[str, str | None], env: dict[str, str]) -> list[str]:
    """One line per requirement of a carried package that neither the carry nor the image meets."""
    carry = {d.name: d for d in carried}
    problems = []
    for dist in sorted(carry.values(), key=lambda d: d.name):
        for raw in dist.requires:
            req = Requirement(raw)
            if not applies(req, env):
                continue
            name = canonicalize_name(req.name)
            where = _met_by(req, carry.get(name), image, name)
            if where is not None:
                problems.append(f"{dist.name} {dist.version} requires {req}: {where}")
    return problems


def _met_by(req: Requirement, carried: Dist | None, image: dict[str, str | None], name: str) -> str | None:
    """None when met; else why not."""
    if carried is not None:
        if req.specifier.contains(Version(carried.version), prereleases=True):
            return None
        return f"the carry has {carried.version}"
    if name not in image:
        return "neither carried nor in the image"
    version = image[name]
    if version is None:
        return None if not str(req.specifier) else "in the image without a recorded version: carry it"
    if req.specifier.contains(Version(version), prereleases=True):
        return None
    return f"the image has {version}"


def shadowed(carried: Iterable[Dist], image: dict[str, str | None]) -> list[str]:
    """Carried packages that replace an image package of another (recorded) version: not an error (the carry
    comes first on the path), but whatever else in the image needs that package now gets the carried one."""
    return [f"{d.name}: carried {d.version} over the image's {image[d.name]}"
            for d in carried if image.get(d.name) not in (None, d.version) and d.name in image]  # fmt: skip


def from_site(site: Path) -> list[Dist]:
    """The dists installed in ``site`` (``*.dist-info/METADATA``)."""
    out = []
    for meta in sorted(site.glob("*.dist-info/METADATA")):
        msg = Parser().parsestr(meta.read_text(encoding="utf-8", errors="replace"), headersonly=True)
        requires = tuple(msg.get_all("Requires-Dist") or ())
        out.append(Dist(canonicalize_name(msg["Name"]), msg["Version"], requires))
    return out


def from_index(pins: dict[str, str | None], python: str) -> list[Dist]:
    """The pins' metadata as pip finds it for the image's platform (``--dry-run --report``: metadata only,
    nothing installed)."""
    specs = [f"{n}=={v}" if v else n for n, v in pins.items()]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        platforms = [x for p in PLATFORMS for x in ("--platform", p)]
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed", "--no-deps",
             "--only-binary=:all:", "--python-version", ".".join(python.split(".")[:2]), "--implementation", "cp",
             *platforms, "--target", str(Path(tmp) / "target"), "--report", str(report), *specs],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        installs = json.loads(report.read_text())["install"]
    return [
        Dist(canonicalize_name(i["metadata"]["name"]), i["metadata"]["version"],
             tuple(i["metadata"].get("requires_dist") or ()))
        for i in installs
    ]  # fmt: skip


def live_image(site: Path) -> dict[str, str | None]:
    """What this interpreter has without the carry: every installed distribution outside ``site``."""
    from importlib import metadata

    out: dict[str, str | None] = {}
    for dist in metadata.distributions():
        location = Path(str(dist.locate_file(""))).resolve()
        if site.resolve() not in (location, *location.parents) and dist.metadata["Name"]:
            out.setdefault(canonicalize_name(dist.metadata["Name"]), dist.version)
    return out


def _python_of(image: dict[str, str | None]) -> str:
    version = image.pop("python", None) or ".".join(map(str, sys.version_info[:3]))
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise SystemExit(f"carry_check: the image list's python=={version} is not a full version")
    return version


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--image", type=Path, default=IMAGE, help=f"the image's list (default {IMAGE.relative_to(ROOT)})"
    )
    parser.add_argument(
        "--carry", type=Path, default=CARRY, help=f"the carry's pins (default {CARRY.relative_to(ROOT)})"
    )
    parser.add_argument(
        "--site", type=Path, help="read the carry's metadata from this installed site instead"
    )
    parser.add_argument(
        "--live", action="store_true", help="the image is this interpreter's packages (with --site)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)  # fmt: skip
    if args.live and args.site is None:
        parser.error("--live needs --site (the carry to leave out of this interpreter's packages)")
    if args.live:
        image, python = live_image(args.site), ".".join(map(str, sys.version_info[:3]))
    else:
        image = read_pins(args.image)
        python = _python_of(image)
    carried = from_site(args.site) if args.site else from_index(read_pins(args.carry), python)
    problems = unmet(carried, image, image_environment(python))
    report = {"python": python, "carried": {d.name: d.version for d in carried}, "unmet": problems,
              "shadowed": shadowed(carried, image)}  # fmt: skip
    if args.json:
        print(json.dumps(report))
    else:
        print(f"carry_check: {len(carried)} carried packages against the image (Python {python}): "
              f"{'all requirements met' if not problems else f'{len(problems)} unmet'}")  # fmt: skip
        for line in problems:
            print(f"  unmet: {line}")
        for line in report["shadowed"]:
            print(f"  note: {line}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
