"""An unreachable S3 endpoint costs one console line while botocore retries, then the one-line error: the
first failed attempt of a request is a WARNING that says retries follow, later attempts are DEBUG and giving
up (after that warning) is INFO. botocore's retry handler (``Config(retries=...)``) still decides how often
and how long; only what we log per attempt changes."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from botocore import exceptions as bce

from paravt_core import storage
from tests.support.paths import ROOT

REPO = ROOT
NOWHERE = "http://127.0.0.1:9"  # nothing listens on the discard port: every attempt is refused at once


def _env(tmp: Path, attempts: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PARAVT_"))}
    env.update(
        PYTHONPATH=str(REPO),
        OMP_NUM_THREADS="1",
        AWS_ENDPOINT_URL=NOWHERE,
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
        AWS_SHARED_CREDENTIALS_FILE=str(tmp / "none"),
        AWS_CONFIG_FILE=str(tmp / "none"),
        AWS_MAX_ATTEMPTS=str(attempts),
    )
    return env


def test_each_attempt_is_logged_but_only_the_first_at_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for key, value in _env(tmp_path, 3).items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    storage.reset_client()
    caplog.set_level(logging.DEBUG, logger=storage.log.name)
    try:
        with pytest.raises(bce.EndpointConnectionError):
            storage.read_bytes("s3://bucket/key.bin")
    finally:
        storage.reset_client()
    records = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == storage.log.name]
    assert [level for level, _ in records] == [logging.WARNING, logging.DEBUG, logging.INFO]
    assert records[0][1].startswith(
        "S3 GetObject /bucket/key.bin attempt 1/3 failed (EndpointConnectionError"
    )
    assert records[1][1].startswith("S3 GetObject /bucket/key.bin attempt 2/3 failed (")
    assert records[2][1].endswith("; giving up after 3 attempts")


def test_unreachable_endpoint_through_the_cli_is_two_lines(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "paravt_core.cli", "report", "output=s3://bucket/report"]
    done = subprocess.run(cmd, env=_env(tmp_path, 4), capture_output=True, text=True, timeout=300)
    lines = done.stderr.splitlines()
    assert done.returncode == 1
    # Before: one "attempt n/4 failed" line per retry, then "giving up", then the error (5 lines).
    assert len(lines) == 2, done.stderr
    assert lines[0].startswith(
        "S3 GetObject /bucket/report/_COMPLETE attempt 1/4 failed (EndpointConnectionError"
    )
    assert lines[0].endswith("; retrying with backoff")
    assert lines[1] == (
        f"paravt report: storage: cannot reach the S3 endpoint {NOWHERE}/bucket/report/_COMPLETE; "
        "check AWS_ENDPOINT_URL and the network"
    )
