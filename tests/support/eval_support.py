"""Shared pieces of the eval tests: an engine keyed by question, tiny configs (fixtures: tests/fixtures/eval.py).

``KeyedEngine`` is the fault-injection engine of the eval tests: the tiny model is random, so to drive a
sample through a given scenario (right answer, hedged answer, parallel tool calls, malformed calls, an empty
answer, a timeout, a failing backend) the main agent's replies are scripted per question - the runner runs
samples concurrently, so a plain reply queue would hand replies to the wrong sample. Replies are tokenized by
the real tokenizer (``ScriptedEngine.complete``); sub-agents answer a fixed report.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from paravt_core.engines.base import Completion, Engine, GenerationRequest
from paravt_core.engines.scripted import Reply, ScriptedEngine
from paravt_core.eval.config import EvalConfig

# Small frames and short generations: fast on the tiny model (see tests/support/agent_support.py).
TINY_AGENT = {
    "overview_frames": 4,
    "max_pixels": 64 * 96,
    "min_pixels": 32 * 32,
    "max_new_tokens": 24,
    "max_turns": 2,
    "temperature": 0.0,
    "subagent": {"temperature": 0.0, "max_new_tokens": 8},
    "crop": {"max_frames": 4},
}


def fixture_entry(entries: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(e for e in entries if e["name"] == name)


def tiny_eval_config(out: Path, model: str, benchmarks: list[dict], **overrides: Any) -> EvalConfig:
    data = {
        "model": model,
        "published_model": "",
        "output": str(out / "eval"),
        "work_dir": str(out / "work"),
        "benchmarks": benchmarks,
        "agent": TINY_AGENT,
        "runner": {"concurrency": 4, "retries": 1, "backoff_s": 0.0},
        "judge": {"enabled": False},
        "max_error_share": 1.0,
        **overrides,
    }
    return EvalConfig.model_validate(data)


class KeyedEngine(Engine):
    """Main-agent replies chosen by a key found in the prompt text; see the module docstring.

    ``script``: key -> list of items (str / Reply / exception), consumed in order per key; the last item
    repeats. Keys are matched against the decoded prompt, longest key first. Unmatched prompts get
    ``default``. Every main prompt's key is logged in ``seen``; ``generate_calls`` counts engine calls."""

    name = "keyed"
    token_level = True

    def __init__(self, processor: Any, script: dict[str, list], default: Any = "<answer>A</answer>",
                 report: str = "A short report."):  # fmt: skip
        self.processor = processor
        self._scripted = ScriptedEngine(processor, [])
        self.script = {k: list(v) for k, v in script.items()}
        self.default = default
        self.report = report
        self.seen: list[str] = []
        self.prompts: dict[str, list[str]] = {}  # key -> decoded main prompts, in order
        self.generate_calls = 0

    def _key(self, request: GenerationRequest) -> str | None:
        text = self.processor.tokenizer.decode(request.input_ids, skip_special_tokens=False)
        for key in sorted(self.script, key=len, reverse=True):
            if key in text:
                self.prompts.setdefault(key, []).append(text)
                return key
        return None

    def _item(self, key: str | None) -> Any:
        if key is None:
            return self.default
        items = self.script[key]
        return items.pop(0) if len(items) > 1 else items[0]

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        self.generate_calls += 1
        items = []
        for request in requests:
            if request.tag != "main":
                items.append(self.report)
                continue
            key = self._key(request)
            self.seen.append(str(key))
            items.append(self._item(key))
        for item in items:
            if isinstance(item, BaseException):
                raise item
        delay = max((i.delay_s for i in items if isinstance(i, Reply)), default=0.0)
        if delay:
            await asyncio.sleep(delay)
        return [self._scripted.complete(r, i) for r, i in zip(requests, items, strict=True)]


# One Video-MME row on a 10 s, 4 fps video (40 frames) with four subtitle cues: at 4 sampled frames
# (0, 13, 26, 39) the cue of seconds 2-3 (frames 8-11) is missed; 64 samples keep every cue.
SUBTITLED_ROW = {"videoID": "fxA", "question_id": "1", "duration": "short", "question": "Q?",
                 "options": ["A. x", "B. y"], "answer": "A"}  # fmt: skip


def write_subtitled_video(root: Path) -> None:
    """``root/data/fxA.mp4`` and ``root/subtitle/fxA.srt``, the media of :data:`SUBTITLED_ROW`."""
    from paravt_core.synth import Event, write_video

    (root / "data").mkdir()
    (root / "subtitle").mkdir()
    write_video(root / "data" / "fxA.mp4", [Event("circle", "red", 0.0, 10.0, (10, 10, 60, 60))], 10.0, 4.0,
                (64, 48))  # fmt: skip
    (root / "subtitle" / "fxA.srt").write_text(
        "1\n00:00:00,000 --> 00:00:01,000\nHi\n\n2\n00:00:02,000 --> 00:00:03,000\nskipped\n\n"
        "3\n00:00:03,000 --> 00:00:04,000\nmiddle\n\n4\n00:00:09,000 --> 00:00:10,000\nend\n"
    )
