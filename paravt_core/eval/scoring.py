"""Scoring one sample: the episode's answer against the gold, with the PARA-GRPO reward functions.

The prediction is the **final reply** (the last generation of the episode, docs/method.md §7): its last ``<answer>`` body
when it has one, else its text (the reward functions read a plain answer whole). An earlier turn's ``<answer>``
never overrides it: after a forced answer "C", an earlier "<answer>A</answer>" is not scored. Multiple-choice items are scored by the letter the answer
commits to (``read_mcq_letter``; out-of-range letters score 0), grounding items by the temporal IoU of
``paravt_core.rewards.accuracy`` (the Charades score). Open-ended items
(MMVU) go to the LLM judge when one is configured and to token F1 otherwise (the results say which). A judge
that cannot answer (``judge_error``, ``judge_timeout``, ``judge_unparseable``) makes the sample an **error**: a fallback score is not a judgement,
so it is neither scored nor dropped.

Unreadable predictions (empty, hedged "A or B", two letters, no letter, no interval) score 0 with their reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from paravt_core.rewards.accuracy import (
    aaccuracy_reward,
    answer_span,
    interval_iou,
    parse_interval,
    read_mcq_letter,
)

from .benchmarks import Sample


@dataclass
class Score:
    score: float | None  # None: not scored (see ``error``)
    parsed: Any = None  # what was compared: letter, (start, end), normalized text
    reason: str | None = None  # why the prediction scored 0 without comparison (hedged_letter, ...)
    source: str = ""  # mcq / tvg / exact / f1 / judge
    error: str | None = None  # judge_error / judge_timeout / judge_unparseable


def prediction_of(final_text: str | None) -> str:
    """What is scored: the final reply, whole (``answer_span`` then reads its last ``<answer>`` or its text)."""
    return final_text or ""


async def score_sample(sample: Sample, prediction: str, judge: Any = None) -> Score:
    """Score ``prediction`` for ``sample``. ``judge``: a ``paravt_core.rewards.judge.Judge`` or None."""
    if sample.qtype == "mcq":  # by the committed letter only (see ``read_mcq_letter``)
        letter, why = read_mcq_letter(prediction)
        if letter is None:
            return Score(0.0, None, why, "mcq")
        if sample.letters and letter not in sample.letters:
            return Score(0.0, letter, "letter_out_of_range", "mcq")
        return Score(float(letter == sample.gold), letter, None, "mcq")
    if sample.qtype == "tvg" and sample.gold_interval is not None:  # the gold seconds as numbers, not re-read
        if not answer_span(prediction).strip():
            return Score(0.0, None, "empty_answer", "tvg")
        pred = parse_interval(prediction)
        if pred is None:
            return Score(0.0, None, "unparseable_interval", "tvg")
        return Score(interval_iou(pred, sample.gold_interval), list(pred), None, "tvg")
    mode = "llm" if (sample.qtype == "oe" and judge is not None) else "f1"
    result = await aaccuracy_reward(
        prediction, sample.gold, sample.qtype, mode, judge, question=sample.question
    )
    if mode == "llm" and result.source == "f1_fallback":
        return Score(None, result.parsed, result.reason, result.source, error=result.reason or "judge_error")
    parsed = list(result.parsed) if isinstance(result.parsed, tuple) else result.parsed
    return Score(float(result.score), parsed, result.reason, result.source)
