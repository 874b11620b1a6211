"""A stage reruns itself in its pod after a crash that a rerun can fix, from its newest checkpoint.

Why in the pod: KFP 2.17's manifests make Argo's default retry policy ``OnError``
(manifests/kustomize/third-party/argo/base/workflow-controller-configmap-patch.yaml, ``workflowDefaults``
``templateDefaults.retryStrategy``), and KFP's compiler sets ``limit``/``backoff`` without a policy, so the
merged policy is ``OnError`` (Argo v4.0.5 operator.go ``mergedTemplateDefaultsInto``; ``processNodeRetries``
retries an ``Error`` node only, not a ``Failed`` one). A stage whose process exits non-zero (an NCCL error,
an OOM-killed rank, a failed S3 call, a failed multi-node job) is therefore not retried by Argo on a stock
install. Every stage resumes from its newest complete checkpoint under its output, so calling it again is
the retry.

What is retried (``retry_reason``): a child process that exited non-zero or was killed (torchrun, the RL
launcher's learner), a multi-node job that failed or vanished, a storage or network error, the rollout
engine failing, an injected fault (tests). Not retried: configuration and input errors (a rerun repeats
them), anything not recognised (a bug), and a SIGTERM (``SystemExit`` 143: the run is being stopped).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
USAGE_STATUS = 2  # paravt's exit status for usage and config errors (paravt_core/cli_errors.py)


def _loaded(module: str):
    return sys.modules.get(module)  # an exception of a library never imported cannot be the one at hand


def retry_reason(err: BaseException) -> str | None:
    """Why a rerun may succeed where this attempt failed, as one line; None when it would fail the same way."""
    if not isinstance(err, Exception):  # SystemExit (SIGTERM: 143), KeyboardInterrupt, Terminated
        return None
    if isinstance(err, subprocess.CalledProcessError):
        if err.returncode < 0:
            return f"{_cmd(err.cmd)} killed by {signal.Signals(-err.returncode).name}"
        if err.returncode == USAGE_STATUS:
            return None
        return f"{_cmd(err.cmd)} exited with status {err.returncode}"
    from paravt_core.faults import InjectedFault

    if isinstance(err, InjectedFault):
        return str(err)
    trainjob = _loaded("paravt_core.launch.trainjob")
    if trainjob is not None and isinstance(err, trainjob.JobPending):
        return None  # nodes never placed within launch.pending_timeout_s: a cluster matter
    if trainjob is not None and isinstance(err, trainjob.JobFailed | trainjob.JobGone):
        return str(err)
    engines = _loaded("paravt_core.engines.base")
    if engines is not None and isinstance(err, engines.EngineError):
        return f"rollout engine: {err}"
    botocore = _loaded("botocore.exceptions")
    if botocore is not None and isinstance(err, botocore.BotoCoreError | botocore.ClientError):
        return f"storage: {err}"
    if isinstance(err, ConnectionError | TimeoutError):
        return f"{type(err).__name__}: {err}"
    return None


def _cmd(cmd: object) -> str:
    parts = cmd if isinstance(cmd, list | tuple) else [cmd]
    return " ".join(str(p) for p in parts[:4]) + (" …" if len(parts) > 4 else "")


def run_with_retries(
    attempt: Callable[[], T],
    *,
    stage: str,
    retries: int,
    backoff_s: float,
    log: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``attempt()``, and up to ``retries`` more times after a failure ``retry_reason`` accepts, waiting
    ``backoff_s`` before the first rerun and twice as long before each next one. The last failure, or one
    that is not retryable, is raised as it is."""
    for n in range(retries + 1):
        try:
            return attempt()
        except Exception as err:
            reason = retry_reason(err)
            if reason is None or n == retries:
                if reason is not None:
                    log(
                        f"{stage}: attempt {n + 1} of {retries + 1} failed ({reason}); no in-pod retries left"
                    )
                raise
            wait = backoff_s * 2**n
            log(
                f"{stage}: attempt {n + 1} of {retries + 1} failed ({reason}); rerunning in the pod in "
                f"{wait:.0f}s from the newest checkpoint"
            )
            sleep(wait)
    raise AssertionError("unreachable")
