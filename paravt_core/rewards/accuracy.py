"""R_acc: how right the answer is (SPEC §5). Pure functions; none of them raises on any text.

Order of checks in ``accuracy_reward``:

1. the answer span: the body of the **last** complete ``<answer>…</answer>``; text without one (a plain
   model answer, as the eval's no-tag modes produce) is used whole, minus ``<think>`` and call blocks;
2. normalized exact match (lower-case, punctuation and the articles a/an/the dropped, spaces collapsed) -> 1;
3. by question type: ``mcq`` letter match (A-J), ``tvg`` temporal IoU, anything else (``oe``) token F1
   (mode ``f1``), 0 (``exact``) or the LLM judge's score (``llm``).

A prediction that cannot be read scores 0 with a machine-readable ``reason`` (``empty_answer``,
``unparseable_letter``, ``hedged_letter``, ``unparseable_interval``, ``bad_gold``, ...); ``reason`` is None
when the prediction was parsed, whatever its score.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from paravt_core.agent.parsing import extract_answer
from paravt_core.video.timeparse import parse_time

if TYPE_CHECKING:  # the judge module imports httpx; plain scoring must not need it
    from .judge import Judge

QuestionType = Literal["mcq", "tvg", "oe"]
RewardMode = Literal["f1", "exact", "llm"]

MCQ_LETTERS = "ABCDEFGHIJ"

_PUNCT = str.maketrans({c: " " for c in string.punctuation + "–—‘’“”"})
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_STRIP_BLOCKS = re.compile(r"<(think|tool_call|tool_code|tool_response)>.*?(</\1>|$)", re.DOTALL)
_TAG = re.compile(r"</?(think|answer|tool_call|tool_code|tool_response)>")

# MCQ patterns, tried in this order on the answer span (SPEC: <answer>, "answer is X", "Option X", lone X).
# Letters are matched upper-case only, so the article "a" in "the answer is a red circle" is not option A.
_ANSWER_IS = re.compile(
    r"(?i:answer)\s*(?:(?i:is)|:)?\s*[:\-]?\s*(?:(?i:option)\s*)?[(\[]?([A-J])\b(?![\w'])"
)
_OPTION = re.compile(r"\b(?i:option)\s*[(\[]?([A-J])\b(?![\w'])")
# The whole span is one letter ("B", "(B)", "b.": any case, nothing else to confuse it with) or starts
# with a lettered option ("B. red", "(B) red").
_LONE = re.compile(r"[(\[]?([A-Ja-j])[)\].:]?")
_LEAD = re.compile(r"(?:[(\[]([A-J])[)\]]|([A-J])[.):])\s")
# Two different letters offered as alternatives: "A or B", "B/C", "A, B".
_HEDGE = re.compile(r"\b([A-J])\b\s*(?:or|and|/|,|&)\s*[(\[]?\b([A-J])\b")

# One time value: clock form (m:ss, h:mm:ss, fractions allowed) or a decimal number, optional unit.
_TIME = r"(\d{1,2}:\d{1,2}:\d{1,2}(?:\.\d+)?|\d+:\d{1,2}(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
_UNIT = r"\s*(?:s|sec|secs|second|seconds)?"
_SEP = r"\s*(?:,|-|–|—|~|to|and|until|till)\s*"
_INTERVAL = re.compile(_TIME + _UNIT + _SEP + _TIME + _UNIT + r"(?![\d:])", re.IGNORECASE)


@dataclass(frozen=True)
class AccuracyResult:
    score: float  # in [0, 1]
    reason: str | None = None  # why the score is 0 without comparing (None: the prediction was parsed)
    parsed: Any = None  # what was compared: the letter, the (start, end) pair, the normalized text
    source: str = "rule"  # "exact", "mcq", "tvg", "f1", "judge", "f1_fallback"


def normalize_answer(text: str) -> str:
    """Lower-case, punctuation -> spaces, articles dropped, whitespace collapsed (SQuAD-style)."""
    text = str(text).lower().translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def extract_answer_text(text: str) -> str | None:
    """Body of the last complete ``<answer>…</answer>`` (stripped), or None."""
    return extract_answer(text)


def answer_span(text: str) -> str:
    """The part of a prediction that is its answer: the last ``<answer>`` body, else the text without
    think / call / tool-response blocks and stray tags (plain answers from the eval's no-tag modes)."""
    body = extract_answer_text(text)
    if body is not None:
        return body
    return _TAG.sub(" ", _STRIP_BLOCKS.sub(" ", text)).strip()


def parse_mcq_letter(text: str) -> str | None:
    """The option letter (A-J, upper-case) a prediction commits to, or None (no letter, or hedged)."""
    letter, _ = read_mcq_letter(text)
    return letter


def read_mcq_letter(text: str) -> tuple[str | None, str | None]:
    """(letter, None) or (None, reason: ``empty_answer`` / ``hedged_letter`` / ``unparseable_letter``).

    The eval scores multiple choice by this letter alone, as ``accuracy_reward`` does for a letter gold."""
    return _mcq_letter(answer_span(text))


def _mcq_letter(span: str) -> tuple[str | None, str | None]:
    """(letter, reason when None)."""
    s = span.strip()
    if not s:
        return None, "empty_answer"
    hedge = _HEDGE.search(s)
    if hedge and hedge.group(1) != hedge.group(2):
        return None, "hedged_letter"
    found = list(_ANSWER_IS.finditer(s))
    if found:
        return found[-1].group(1).upper(), None
    found = list(_OPTION.finditer(s))
    if found:
        return found[-1].group(1).upper(), None
    lone = _LONE.fullmatch(s.rstrip("."))
    if lone:
        return lone.group(1).upper(), None
    lead = _LEAD.match(s + " ")
    if lead:
        return (lead.group(1) or lead.group(2)), None
    return None, "unparseable_letter"


def parse_interval(text: str) -> tuple[float, float] | None:
    """(start, end) seconds of the last interval written in the answer span, or None.

    Accepted: ``s, e``, ``s - e``, ``s to e``, ``s–e``, ``[s, e]``, ``m:ss`` / ``h:mm:ss`` values, a unit
    after each value ("2.5s - 5 seconds"). A reversed pair is swapped; values must be finite and below a
    week (``parse_time``'s bound)."""
    span = answer_span(text)
    found = list(_INTERVAL.finditer(span))
    for match in reversed(found):
        try:
            a, b = parse_time(match.group(1)), parse_time(match.group(2))
        except ValueError:
            continue
        return (a, b) if a <= b else (b, a)
    return None


def interval_iou(pred: tuple[float, float], gold: tuple[float, float]) -> float:
    """Temporal IoU of two [start, end] intervals (reversed ones are reordered); 0 when the union is 0."""
    try:
        ps, pe = sorted((float(pred[0]), float(pred[1])))
        gs, ge = sorted((float(gold[0]), float(gold[1])))
    except (TypeError, ValueError, IndexError):
        return 0.0
    if not all(math.isfinite(v) for v in (ps, pe, gs, ge)):
        return 0.0
    inter = max(0.0, min(pe, ge) - max(ps, gs))
    union = (pe - ps) + (ge - gs) - inter
    return inter / union if union > 0 else 0.0


def token_f1(pred: str, gold: str) -> float:
    """F1 of the normalized token multisets. Both empty: 1; one empty: 0."""
    p, g = normalize_answer(pred).split(), normalize_answer(gold).split()
    if not p or not g:
        return float(p == g)
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def question_kind(question_type: str | None) -> QuestionType:
    """``mcq`` and ``tvg`` as given; anything else is open-ended (SPEC §2.4)."""
    kind = (question_type or "").strip().lower()
    return kind if kind in ("mcq", "tvg") else "oe"  # type: ignore[return-value]


def _rule_score(span: str, gold: str, kind: QuestionType, mode: RewardMode) -> AccuracyResult | None:
    """Score by the rules; None when the judge must decide (oe in ``llm`` mode)."""
    if not span.strip():
        return AccuracyResult(0.0, "empty_answer")
    norm = normalize_answer(span)
    if kind == "mcq":
        gold_letter, _ = _mcq_letter(gold)
        letter, why = _mcq_letter(span)
        # A letter gold is compared as a letter, before any exact match: the article rule of the
        # normalization would read the hedge "A, B" as "b" and pay it in full.
        if gold_letter is not None:
            if letter is None:
                return AccuracyResult(0.0, why)
            return AccuracyResult(float(letter == gold_letter), None, letter, "mcq")
    if norm and norm == normalize_answer(gold):
        return AccuracyResult(1.0, None, norm, "exact")
    if kind == "mcq":
        return AccuracyResult(0.0, "bad_gold" if letter is not None else why, letter)
    if kind == "tvg":
        pred = parse_interval(span)
        if pred is None:
            return AccuracyResult(0.0, "unparseable_interval")
        gold_iv = parse_interval(gold)
        if gold_iv is None:
            return AccuracyResult(0.0, "bad_gold", pred)
        return AccuracyResult(interval_iou(pred, gold_iv), None, pred, "tvg")
    if mode == "exact":
        return AccuracyResult(0.0, None, norm, "exact")
    if mode == "llm":
        return None
    return AccuracyResult(token_f1(span, gold), None, norm, "f1")


def _before_judge(
    prediction: str, gold: str, question_type: str | None, mode: RewardMode, judge: Judge | None
) -> tuple[AccuracyResult | None, str]:
    """(the rule score, the answer span); the score is None only when ``judge`` must decide."""
    span = answer_span(str(prediction))
    result = _rule_score(span, str(gold), question_kind(question_type), mode)
    if result is None and judge is None:
        result = AccuracyResult(token_f1(span, gold), "no_judge", normalize_answer(span), "f1_fallback")
    return result, span


def _from_verdict(verdict: Any) -> AccuracyResult:
    return AccuracyResult(verdict.score, verdict.reason, verdict.raw, verdict.source)


def accuracy_reward(
    prediction: str,
    gold: str,
    question_type: str | None,
    mode: RewardMode = "f1",
    judge: Judge | None = None,
    *,
    question: str = "",
) -> AccuracyResult:
    """R_acc of one prediction (a whole completion or a plain answer). Never raises.

    In ``llm`` mode open-ended answers go to ``judge.score`` (which itself falls back to token F1 on
    failure); without a judge they are scored by token F1 with reason ``no_judge``."""
    try:
        result, span = _before_judge(prediction, gold, question_type, mode, judge)
        return result if result is not None else _from_verdict(judge.score(question, span, str(gold)))
    except Exception as err:  # a reward never raises: the sample scores 0 and says why
        return AccuracyResult(0.0, f"error:{type(err).__name__}")


async def aaccuracy_reward(
    prediction: str,
    gold: str,
    question_type: str | None,
    mode: RewardMode = "f1",
    judge: Judge | None = None,
    *,
    question: str = "",
) -> AccuracyResult:
    """``accuracy_reward`` for callers inside an event loop (the judge is awaited, not blocked on)."""
    try:
        result, span = _before_judge(prediction, gold, question_type, mode, judge)
        return result if result is not None else _from_verdict(await judge.ascore(question, span, str(gold)))
    except Exception as err:
        return AccuracyResult(0.0, f"error:{type(err).__name__}")
