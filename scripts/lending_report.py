"""The GPU lending's own reporting: what the machine is (``versions``) and everything it measured, gathered
into what a lending brings back (``report``). Standard library only (plus what it finds), so it still
reports when the carry or torch fails to import.

    python scripts/lending_report.py versions --build B [--site S]   # B/versions.json (gpu_lending.sh's first part)
    python scripts/lending_report.py report --build B --out OUT --wall 312 --total 420

A lending returns at most 8 files from $OUT (16 MiB each), so ``report`` writes at most :data:`MAX_FILES`:
``summary.md`` (also printed: stdout is all that comes back when the files do not), ``results.json`` (every
number: versions, the image's packages, parts, probe, each profile's whole summary, the sft_step item, the
tail of each failed part's log), ``logs.tar.gz`` (every part's log) and the profiles' traces, split in parts
under 16 MiB, whole traces only, most wanted first, while the count allows; the rest are named as left out.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

MAX_FILES = 8  # what a lending returns from $OUT
PART_BYTES = 15 * 2**20  # under the 16 MiB a lending returns per file
FIXED = ("summary.md", "results.json", "logs.tar.gz")
TAIL_LINES = 15  # of a failed part's log, in the printed summary (all of it is in logs.tar.gz)


def _run(command: list[str], timeout: float = 10.0) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        return (done.stdout + done.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"unavailable ({type(err).__name__})"


def _imported(name: str) -> dict[str, Any]:
    """A module's version and file, or why it did not import (the carry's packages, the image's)."""
    try:
        module = __import__(name)
    except Exception as err:  # any import failure is a finding, not a crash of the report
        return {"error": f"{type(err).__name__}: {err}"[:300]}
    return {"version": getattr(module, "__version__", None), "file": getattr(module, "__file__", None)}


def versions(site: Path | None) -> dict[str, Any]:
    """The machine: Python, torch (CUDA, cuDNN, GPUs), transformers, the carry's packages as imported, the
    driver, libcuda's links, every installed distribution (the image's list, for images/gpu-lending-image.txt)."""
    out: dict[str, Any] = {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                           "python": sys.version.split()[0], "executable": sys.executable}  # fmt: skip
    try:
        import torch

        out["torch"] = torch.__version__
        out["cuda"] = torch.version.cuda
        out["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        out["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if out["gpus"]:
            cap = torch.cuda.get_device_capability(0)
            out["capability"] = f"{cap[0]}.{cap[1]}"
    except Exception as err:
        out["torch"] = f"error: {type(err).__name__}: {err}"[:300]
    for name in ("transformers", "typing_extensions", "pydantic", "pydantic_core", "triton"):
        got = _imported(name)
        if name == "typing_extensions" and "version" in got:  # the module has no __version__
            from importlib import metadata

            got["version"] = metadata.version("typing_extensions")
        out[name] = got
    out["nvidia_smi"] = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv"])
    links = []
    for folder in ("/usr/lib/x86_64-linux-gnu", "/usr/local/nvidia/lib64"):
        for f in sorted(Path(folder).glob("libcuda.so*")) if Path(folder).is_dir() else []:
            target = os.path.realpath(f)
            links.append(f"{f} -> {target} {'ok' if os.path.exists(target) else 'DANGLING'}")
    out["libcuda"] = links
    from importlib import metadata

    packages = {}
    for dist in metadata.distributions():
        where = str(dist.locate_file(""))
        carried = site is not None and os.path.realpath(where).startswith(os.path.realpath(site))
        if dist.metadata["Name"] and not carried:
            packages.setdefault(dist.metadata["Name"], dist.version)
    out["packages"] = dict(sorted(packages.items(), key=lambda kv: kv[0].lower()))
    if site is not None:  # the carry against this very image (packaging is in it)
        check = Path(__file__).with_name("carry_check.py")
        text = _run([sys.executable, str(check), "--site", str(site), "--live", "--json"], timeout=60)
        try:
            out["carry_check"] = json.loads(text.splitlines()[-1])
        except (ValueError, IndexError):
            out["carry_check"] = {"error": text[-500:]}
    return out


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_parts(build: Path) -> list[dict[str, Any]]:
    """``parts.tsv`` rows: part, status, milliseconds, limit -> dicts (seconds)."""
    path = build / "parts.tsv"
    rows = path.read_text().splitlines() if path.is_file() else []
    out = []
    for line in rows:
        name, status, ms, limit, *rest = line.split("\t")
        out.append({"part": name, "status": status, "seconds": round(int(ms) / 1000, 1), "limit_s": int(limit),
                    "overrides": rest[0].split() if rest and rest[0] else []})  # fmt: skip
    return out


def profile_row(summary: dict[str, Any]) -> dict[str, Any]:
    """What the summary table shows of one profile, and which attention kernels ran (by time per step)."""
    kernels = summary.get("heaviest_kernels") or []
    attention = summary.get("attention_kernels") or []  # picked by name in gpu_profile.py (ATTENTION_KERNEL)
    keys = ("tokens_per_s", "mfu", "hfu", "mfu_6n", "peak_tflops", "gpu_busy_share", "peak_mem_gib", "step_time_s", "losses",
            "sdpa_backend", "wall_s")  # fmt: skip
    # the wrappers (aten::scaled_dot_product_attention, autograd nodes) take ~0 s: the kernels that ran do not
    ran = [k for k in attention if k["s_per_step"] >= 5e-4] or attention[:1]
    return {**{k: summary.get(k) for k in keys}, "top_kernels": kernels[:5], "attention_kernels": ran[:3]}


def _tail(path: Path, lines: int = TAIL_LINES, width: int = 160) -> list[str]:
    if not path.is_file():
        return []
    return [x[:width] for x in path.read_text(errors="replace").splitlines()[-lines:]]


def gather(build: Path, wall: int, total: int) -> dict[str, Any]:
    parts = read_parts(build)
    profiles = {}
    for p in parts:
        if p["part"].startswith("profile-"):
            summary = _json(build / p["part"] / "summary.json")
            if summary is not None:
                profiles[p["part"].removeprefix("profile-")] = {
                    "overrides": p["overrides"],
                    "summary": summary,
                }
    failed = {p["part"]: _tail(build / "logs" / f"{p['part']}.log") for p in parts
              if p["status"] not in ("pass", "skipped")}  # fmt: skip
    return {
        "wall_s": wall,
        "total_limit_s": total,
        "passed": bool(parts) and all(p["status"] == "pass" for p in parts),
        "versions": _json(build / "versions.json"),
        "parts": parts,
        "pixels_probe": _json(build / "probe" / "pixels-probe.json"),
        "profiles": profiles,
        "gpu_check": _json(build / "gpu-check" / "gpu-check.json"),
        "failed_tails": failed,
    }


def _pct(x: Any) -> str:
    return "n/a" if not isinstance(x, int | float) else f"{100 * x:.1f} %"


def _num(x: Any, fmt: str = ",.0f") -> str:
    return "n/a" if not isinstance(x, int | float) else format(x, fmt)


def _version(v: Any) -> str:
    if isinstance(v, dict):
        return str(v.get("version") or v.get("error"))
    return str(v)


def markdown(r: dict[str, Any], files: list[str], left_out: list[str]) -> str:
    v = r["versions"] or {}
    ok = sum(p["status"] == "pass" for p in r["parts"])
    lines = [f"# GPU lending, {v.get('date', '?')}", "",
             f"wall {r['wall_s']} s of {r['total_limit_s']} s; parts passed {ok}/{len(r['parts'])}", "",
             "## Machine", ""]  # fmt: skip
    lines += [f"- python {v.get('python')}; torch {v.get('torch')} (CUDA {v.get('cuda')}, cuDNN {v.get('cudnn')}); "
              f"transformers {_version(v.get('transformers'))}; triton {_version(v.get('triton'))}",
              f"- typing_extensions {_version(v.get('typing_extensions'))}; pydantic {_version(v.get('pydantic'))}; "
              f"pydantic_core {_version(v.get('pydantic_core'))}",
              f"- GPUs {v.get('gpus')} (capability {v.get('capability')})",
              f"- nvidia-smi: {' / '.join(str(v.get('nvidia_smi', '')).splitlines()[1:3]) or v.get('nvidia_smi')}"]  # fmt: skip
    lines += [f"- {link}" for link in v.get("libcuda", [])]
    check = v.get("carry_check")
    if isinstance(check, dict):
        unmet = check.get("unmet")
        lines.append(
            f"- carry check on this image: {'all requirements met' if unmet == [] else unmet or check}"
        )
    lines += ["", "## Parts", "", "| part | status | seconds | limit |", "|---|---|---|---|"]
    lines += [f"| {p['part']} | {p['status']} | {p['seconds']} | {p['limit_s']} |" for p in r["parts"]]
    probe = r["pixels_probe"]
    if probe:
        loss = probe.get("loss", {})
        lines += ["", f"Pixels probe: pixels_matter {probe.get('pixels_matter')} (loss real {loss.get('real')}, "
                  f"shuffled {loss.get('shuffled')}); native_pixels_matter {probe.get('native_pixels_matter')}"]  # fmt: skip
    if r["profiles"]:
        lines += ["", "## Attention", "",
                  "| profile | tokens/s | MFU | HFU | MFU (6N) | GPU busy | peak GiB | s/step | losses |",
                  "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        rows = {name: profile_row(p["summary"]) for name, p in r["profiles"].items()}
        for name, s in rows.items():
            steps = ", ".join(f"{t:.2f}" for t in s["step_time_s"] or [])
            losses = ", ".join(f"{x:.4f}" for x in s["losses"] or [])
            lines.append(f"| {name} | {_num(s['tokens_per_s'])} | {_pct(s['mfu'])} | {_pct(s['hfu'])} | {_pct(s['mfu_6n'])} | "
                         f"{_pct(s['gpu_busy_share'])} | {_num(s['peak_mem_gib'], '.2f')} | {steps} | {losses} |")  # fmt: skip
        for name, s in rows.items():
            lines += ["", f"{name} ({' '.join(r['profiles'][name]['overrides'])}; sdpa backend "
                      f"{s['sdpa_backend']}): attention kernels "
                      + (", ".join(f"`{k['name'][:70]}` {k['s_per_step']:.3f} s" for k in s["attention_kernels"])
                         or "none named")]  # fmt: skip
            lines += [f"  - `{k['name'][:90]}` {k['s_per_step']:.3f} s/step" for k in s["top_kernels"]]
    items = (r["gpu_check"] or {}).get("items", [])
    for item in items:
        if item.get("status") != "skipped":
            detail = str(item.get("detail", "")).strip().splitlines()
            lines += ["", f"gpu-check {item['name']}: {item['status']} in {item.get('seconds', 0):.1f} s: "
                      f"{detail[0][:300] if detail else ''}"]  # fmt: skip
    for part, tail in r["failed_tails"].items():
        lines += ["", f"## {part}: last lines of its log", "", "```", *tail, "```"]
    lines += ["", f"Files in $OUT: {', '.join(files)}"]
    if left_out:
        lines.append(f"Left out (over {MAX_FILES} files): {', '.join(left_out)}")
    return "\n".join(lines) + "\n"


def _split(path: Path, out: Path, stem: str) -> list[str]:
    names = []
    with open(path, "rb") as src:
        for i, chunk in enumerate(iter(lambda: src.read(PART_BYTES), b"")):
            name = f"{stem}.part-{i:02d}"
            (out / name).write_bytes(chunk)
            names.append(name)
    return names


def trace_plan(traces: list[tuple[str, int]], free: int) -> tuple[list[str], list[str]]:
    """(traces kept, traces left out): in the order given, each whole (its parts all fit) while ``free``
    file slots last."""
    kept, left = [], []
    for name, size in traces:
        parts = max(1, -(-size // PART_BYTES))
        if parts <= free:
            kept.append(name)
            free -= parts
        else:
            left.append(name)
    return kept, left


def write(build: Path, out: Path, wall: int, total: int) -> tuple[dict[str, Any], str]:
    report = gather(build, wall, total)
    out.mkdir(parents=True, exist_ok=True)
    traces = [(name, (build / f"profile-{name}" / "trace.json.gz").stat().st_size)
              for name in report["profiles"] if (build / f"profile-{name}" / "trace.json.gz").is_file()]  # fmt: skip
    kept, left = trace_plan(traces, MAX_FILES - len(FIXED))
    files = list(FIXED)
    for name in kept:
        files += _split(build / f"profile-{name}" / "trace.json.gz", out, f"trace-{name}.json.gz")
    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
        for path in sorted((build / "logs").glob("*.log")):
            tar.add(path, arcname=f"logs/{path.name}")
        for extra in ("gpu-check/gpu-check.md",):
            if (build / extra).is_file():
                tar.add(build / extra, arcname=extra)
    report["files"], report["traces_left_out"] = files, [f"trace-{n}" for n in left]
    (out / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    text = markdown(report, files, report["traces_left_out"])
    (out / "summary.md").write_text(text)
    return report, text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="verb", required=True)
    v = sub.add_parser("versions", help="BUILD/versions.json: the machine and its packages")
    v.add_argument("--build", type=Path, required=True)
    v.add_argument("--site", type=Path, help="the unpacked carry (checked against this image)")
    r = sub.add_parser("report", help="OUT: at most 8 files; the summary printed")
    r.add_argument("--build", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--wall", type=int, required=True, help="seconds the lending took")
    r.add_argument("--total", type=int, required=True, help="its limit in seconds")
    args = parser.parse_args(argv)  # fmt: skip
    if args.verb == "versions":
        args.build.mkdir(parents=True, exist_ok=True)
        data = versions(args.site)
        (args.build / "versions.json").write_text(json.dumps(data, indent=2) + "\n")
        shown = {k: data.get(k) for k in ("python", "torch", "cuda", "cudnn", "gpus")}
        print(json.dumps(shown))
        return 0
    report, text = write(args.build, args.out, args.wall, args.total)
    sys.stdout.write(text)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
