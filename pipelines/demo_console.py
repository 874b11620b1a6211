"""What ``make demo`` shows: one line per stage with its time and key numbers; everything else to a log file.

The KFP local runner logs every task's executor input, the stages save their resolved configs, and
libraries warn; all of that goes to ``<out>/demo.log`` (the file descriptors are redirected, so the
runner's subprocesses write there too). A watcher reads the runner's task lines from the log as they
appear and prints a stage's line when its task finishes, with numbers read from the stage's metrics.
The console gets plain text: no colours or cursor codes, so a pipe or a CI log reads as it prints.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

# kfp 2.17's local orchestrator (kfp/local/logging_utils.py): "HH:MM:SS.mmm - INFO - Executing task 'x'" and
# "... - INFO - Task 'x' finished with status SUCCESS", the task names coloured with ANSI codes.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TASK = re.compile(
    r"^(\d\d):(\d\d):(\d\d(?:\.\d+)?) - INFO - (?:Executing task '([\w-]+)'|Task '([\w-]+)' finished with status (\w+))"
)


@dataclass(frozen=True)
class TaskEvent:
    seconds: float  # since midnight, as the runner's clock printed it
    task: str
    status: str | None  # None: started; else the final status (SUCCESS, FAILURE)


def parse_task_events(text: str) -> list[TaskEvent]:
    """The runner's task start / finish lines in ``text`` (ANSI codes ignored)."""
    events = []
    for line in _ANSI.sub("", text).splitlines():
        m = _TASK.match(line)
        if m:
            h, mi, s, started, finished, status = m.groups()
            events.append(TaskEvent(int(h) * 3600 + int(mi) * 60 + float(s), started or finished, status))
    return events


def _metrics(path: Path) -> dict[str, Any]:
    try:
        return json.loads((path / "metrics.json").read_text())
    except (OSError, ValueError):
        return {}


def _pct(value: Any) -> str:
    """An eval headline, already in percent (paravt_core/eval/metrics.py: accuracy and mIoU x 100)."""
    return f"{float(value):.0f}%" if isinstance(value, int | float) else "?"


def stage_summary(task: str, run_prefix: Path, data_dir: Path) -> str:
    """Key numbers of the stage behind a task of the train pipeline, from its ``metrics.json``."""
    if task == "eval-shards-op":  # the eval step's plan and merges (pipelines/eval_step.py)
        return "one eval task per benchmark and shard"
    if task == "eval-merge-op":
        return "each benchmark's results complete (shards merged)"
    stage = task.removesuffix("-op").split("-")[0]
    if stage == "data":
        m = _metrics(data_dir)
        return f"{m.get('sft_rows', '?')} SFT + {m.get('rl_rows', '?')} RL rows kept, {m.get('rejected', '?')} rejected"
    if stage == "sft":
        m = _metrics(run_prefix / "sft")
        first, last = m.get("loss_first"), m.get("loss_last")
        loss = (
            f"loss {first:.2f} -> {last:.2f}" if isinstance(first, float) and isinstance(last, float) else ""
        )
        return f"{m.get('steps', '?')} steps, {loss}, {m.get('rows_used', '?')} rows used"
    if stage == "rl":
        m = _metrics(run_prefix / "rl")
        first, last = m.get("reward_first"), m.get("reward_last")
        reward = (
            f"mean reward {first:.3f} -> {last:.3f}"
            if isinstance(first, float) and isinstance(last, float)
            else ""
        )
        return f"{m.get('steps', '?')} PARA-GRPO steps over {m.get('prompts', '?')} RL prompts, {reward}"
    if stage == "eval":
        parts = []
        for bench in sorted(p for p in (run_prefix / "eval").glob("*") if p.is_dir()):
            m = _metrics(bench)
            scores = ", ".join(
                f"{k.split('.')[0]} {_pct(v)}"
                for k, v in sorted(m.items())
                if k.endswith(f".{bench.name}.accuracy") or k.endswith(f".{bench.name}.miou")
            )
            errors = int(m.get("total.errors", 0))
            parts.append(
                f"{bench.name}: {scores} ({int(m.get('total.samples', 0))} answers, {errors} errors)"
            )
        return "; ".join(parts) or "no eval output"
    if stage == "report":
        return "report.html, report.md, metrics.json"
    return ""


class TaskWatcher:
    """Follows the runner's log and calls ``say`` once per finished task (a thread; ``stop`` ends it). Only
    what this run appends counts: the log of an earlier demo in the same directory is kept, not replayed."""

    def __init__(self, log_path: Path, on_finish: Callable[[str, str, float], None], poll_s: float = 0.3):
        self.log_path, self.on_finish, self.poll_s = log_path, on_finish, poll_s
        self._stop = threading.Event()
        self._started: dict[str, float] = {}
        self._seen = 0
        self._offset = log_path.stat().st_size if log_path.exists() else 0
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> TaskWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._scan()  # the last task's line may have arrived after the final poll

    def _scan(self) -> None:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(self._offset)
                text = fh.read().decode(errors="replace")
        except OSError:
            return
        events = parse_task_events(text)
        for event in events[self._seen :]:
            if event.status is None:
                self._started[event.task] = event.seconds
            else:
                start = self._started.get(event.task, event.seconds)
                self.on_finish(event.task, event.status, (event.seconds - start) % 86400)
        self._seen = len(events)

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            self._scan()


@contextlib.contextmanager
def output_to_log(log_path: Path) -> Iterator[TextIO]:
    """Send stdout and stderr (file descriptors 1 and 2, so subprocesses too) to ``log_path``; yields a
    stream to the original stdout for the console lines. Without real descriptors (an embedding that
    replaced sys.stdout) only Python-level output is redirected."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    with open(log_path, "a", buffering=1) as log:
        try:
            fds = (sys.stdout.fileno(), sys.stderr.fileno())
        except (AttributeError, OSError, ValueError):
            fds = None
        if fds is None:
            console = sys.stdout
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                yield console
            return
        saved = [os.dup(fd) for fd in fds]
        console = os.fdopen(os.dup(saved[0]), "w", buffering=1)
        try:
            for fd in fds:
                os.dup2(log.fileno(), fd)
            yield console
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, old in zip(fds, saved, strict=True):
                os.dup2(old, fd)
                os.close(old)
            console.close()


def tiny_model_parameters(model_dir: str) -> int:
    """Parameters of a saved model, from its safetensors headers (no tensor is loaded)."""
    from safetensors import safe_open

    total = 0
    for path in Path(model_dir).glob("*.safetensors"):
        with safe_open(str(path), "pt") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                shape = f.get_slice(name).get_shape()
                n = 1
                for d in shape:
                    n *= d
                total += n
    return total


def timed() -> Callable[[], float]:
    start = time.perf_counter()
    return lambda: time.perf_counter() - start
