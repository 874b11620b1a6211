"""Progress in pod logs: when stderr is not a terminal (a pod's log in the Argo/KFP UI, a file), a live bar
does not render, so the stages print one plain line every ``log_every`` steps, at most one per
``progress_every_s`` (the first and the last step always), with step/total, percent, the key numbers and
an ETA from this process's own pace::

    sft step 120/2400 (5.0 %) loss 1.234 6,210 tok/s eta 13h02m
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from paravt_core.rewards.terms import terms_text


def is_terminal(stream: TextIO | None = None) -> bool:
    stream = sys.stderr if stream is None else stream
    return bool(getattr(stream, "isatty", lambda: False)())


def eta_text(seconds: float) -> str:
    """``13h02m``, ``5m07s``, ``42s``; two days and more: ``2d03h``."""
    s = max(0, round(seconds))
    days, rest = divmod(s, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


class Cadence:
    """When to print: every ``every`` units that are also ``every_s`` seconds after the last line; the first
    and the last always."""

    def __init__(self, every: int, every_s: float, clock: Callable[[], float] = time.monotonic):
        self.every, self.every_s, self.clock = every, every_s, clock
        self.last: float | None = None

    def due(self, done: int, total: int) -> bool:
        now = self.clock()
        first, last = self.last is None, done >= total
        if first or last or (done % self.every == 0 and now - self.last >= self.every_s):
            self.last = now
            return True
        return False


class StepProgress:
    """Plain step lines of a training stage (``sft``, ``rl``); ``start``: the steps done before this process."""

    def __init__(
        self,
        stage: str,
        total: int,
        start: int,
        every: int,
        every_s: float,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.stage, self.total, self.start = stage, total, start
        self.stream = stream
        self.clock = clock
        self.cadence = Cadence(every, every_s, clock)
        self.t0 = clock()

    def line(self, step: int, numbers: str) -> str:
        done = step - self.start
        pace = (self.clock() - self.t0) / done if done > 0 else 0.0
        pct = 100.0 * step / self.total
        return f"{self.stage} step {step}/{self.total} ({pct:.1f} %) {numbers} eta {eta_text(pace * (self.total - step))}"

    def update(self, step: int, numbers: str) -> str | None:
        if not self.cadence.due(step, self.total):
            return None
        text = self.line(step, numbers)
        print(text, file=self.stream or sys.stderr, flush=True)
        return text

    def close(self) -> None:
        pass


def sft_numbers(record: dict[str, Any]) -> str:
    return f"loss {record['loss']:.3f} {record['tokens_per_s']:,.0f} tok/s"


def rl_numbers(metrics: dict[str, Any]) -> str:
    return (
        f"reward {metrics['reward_mean']:.3f} {terms_text(metrics, short=True)} "
        f"tool calls {metrics['calls_per_rollout']:.2f}/rollout "
        f"staleness {metrics.get('staleness_mean', 0.0):.1f}"
    )


class EvalProgress:
    """Plain eval lines: samples done/total per benchmark (all protocols), accuracy so far (the mean score of
    the samples scored in this process), an ETA from this process's pace::

        eval 37/120 (30.8 %) synthetic 20/40 acc 0.550 | videomme 17/80 acc 0.412 eta 4m10s
    """

    def __init__(
        self,
        totals: dict[str, int],
        done: dict[str, int],
        every: int,
        every_s: float,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.totals, self.done = dict(totals), {b: done.get(b, 0) for b in totals}
        self.start = sum(self.done.values())
        self.scores: dict[str, list[float]] = {b: [] for b in totals}
        self.stream, self.clock = stream, clock
        self.cadence = Cadence(every, every_s, clock)
        self.t0 = clock()

    def line(self) -> str:
        done, total = sum(self.done.values()), sum(self.totals.values())
        parts = []
        for bench, n in self.totals.items():
            scores = self.scores[bench]
            acc = f" acc {sum(scores) / len(scores):.3f}" if scores else ""
            parts.append(f"{bench} {self.done[bench]}/{n}{acc}")
        ran = done - self.start
        pace = (self.clock() - self.t0) / ran if ran > 0 else 0.0
        pct = 100.0 * done / total if total else 100.0
        return f"eval {done}/{total} ({pct:.1f} %) {' | '.join(parts)} eta {eta_text(pace * (total - done))}"

    def update(self, record: dict[str, Any]) -> str | None:
        bench = record.get("benchmark", "")
        if bench in self.done:
            self.done[bench] += 1
            if record.get("status") == "ok" and isinstance(record.get("score"), int | float):
                self.scores[bench].append(float(record["score"]))
        if not self.cadence.due(sum(self.done.values()), sum(self.totals.values())):
            return None
        text = self.line()
        print(text, file=self.stream or sys.stderr, flush=True)
        return text
