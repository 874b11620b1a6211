"""The nightly scheduler Job's command (`paravt pipeline schedule create nightly … --sync`) stays
light on both its paths: it never imports torch, and its peak memory stays well under the Job's own
memory limit (read from the rendered manifest). Measured in a child process (the Job's command line,
run as in the container), against the KFP test server (success) and an unreachable host (error)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.kfp_test_server import KfpTestServer
from tests.support.manifests_support import cron_job_named, render
from tests.support.paths import ROOT

# The Job's command, with what it reports about itself: torch imported? peak RSS (VmHWM).
PROBE = """
import json, sys
from paravt_core.cli import main
rc = main(sys.argv[1:])
# VmHWM: this process image's own peak. ru_maxrss would not do: Linux carries it across execve, so a
# probe started by a big pytest process would report pytest's peak.
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
peak = int(hwm.split()[1]) * 1024
print(json.dumps({"rc": rc, "torch": "torch" in sys.modules, "peak_bytes": peak}), file=sys.stderr)
"""


def _job_memory_limit_bytes() -> int:
    job = cron_job_named(render("prod"), "paravt-nightly-schedule")["spec"]["jobTemplate"]
    limit = job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
    assert limit.endswith("Gi")
    return int(limit[:-2]) << 30


def _schedule(host: str, tmp_path: Path) -> dict:
    params = tmp_path / "params.yaml"
    params.write_text("checkpoint_uri: s3://m/latest\nresults_prefix: s3://r/nightly\n")
    argv = ["pipeline", "schedule", "create", "nightly", "--name", "paravt-nightly-eval"]
    argv += ["--experiment", "paravt-nightly", "--cron", "0 0 2 * * *", "--params", str(params)]
    argv += ["--host", host, "--namespace", "paravt", "--sync"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), KFP_TOKEN="t0k")
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    print(f"scheduler {host}: exit {report['rc']}, peak {report['peak_bytes'] / 2**20:.0f} MiB")
    return report


@pytest.mark.parametrize("path", ["success", "error"])
def test_scheduler_command_never_imports_torch(path: str, tmp_path) -> None:
    limit = _job_memory_limit_bytes()
    if path == "success":
        with KfpTestServer(token="t0k") as server:
            report = _schedule(server.url, tmp_path)
            assert len(server.state.recurring_runs) == 1
        assert report["rc"] == 0
    else:
        report = _schedule("http://127.0.0.1:9", tmp_path)  # nothing listens there: connection refused
        assert report["rc"] == 1
    assert report["torch"] is False
    # Well under the Job's limit (torch alone took ~800 MB of the 1 GiB before).
    assert report["peak_bytes"] < limit / 2, (report["peak_bytes"], limit)
