"""R_acc: how right the answer is (docs/method.md §5). Pure functions; none of them raises on any text.

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
import unicodedata
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from paravt_core.agent.parsing import extract_answer
from paravt_core.video.timeparse import parse_time

from .f1 import normalize_answer, token_f1


class Judge(Protocol):
    """What ``accuracy_reward`` needs of an LLM judge (``paravt_core.rewards.judge.Judge`` is one); a
    structural type, so this module does not import the judge (nor the judge this one)."""

    def score(self, question: str, prediction: str, gold: str) -> Any: ...

    async def ascore(self, question: str, prediction: str, gold: str) -> Any: ...


QuestionType = Literal["mcq", "tvg", "oe"]
RewardMode = Literal["f1", "exact", "llm"]

MCQ_LETTERS = "ABCDEFGHIJ"

_STRIP_BLOCKS = re.compile(r"<(think|tool_call|tool_code|tool_response)>.*?(</\1>|$)", re.DOTALL)
# A reply cut off (or ended) inside its reasoning: "<think>... so the answer is A" with no </think>.
_UNCLOSED_THINK = re.compile(r"<think>((?:(?!</think>).)*)$", re.DOTALL)
_TAG = re.compile(r"</?(think|answer|tool_call|tool_code|tool_response)>")

# MCQ forms. Letters are matched upper-case only (except a span that is one letter and nothing else), so the
# article "a" in "the answer is a red circle" is not option A. ``_L``: one option letter, optionally in
# brackets, not part of a word.
_L = r"[(\[]?([A-J])[)\]]?(?![\w'])"
# A statement that commits to a letter: "the answer is B", "Answer: B", "the best option is B", "my choice
# is B", "I choose B", "B is correct" / "B is the best answer". The LAST statement wins ("I thought the
# answer is A, but the answer is B" -> B).
_STATEMENT = re.compile(
    r"(?:(?i:\banswer\b)(?:\s+(?i:is|would\s+be|should\s+be|will\s+be|must\s+be))?\s*[:\-=]?"
    r"|答案\s*(?:应该|应)?\s*(?:是|为)?\s*[:：]?|选择?"  # "答案是B", "答案为 C", "选C", "选择D" (lmms-eval reads them)
    r"|(?i:\b(?:option|choice)\s+(?:is|would\s+be|should\s+be))\s*:?"
    r"|(?i:\bi\s+(?:would\s+|will\s+)?(?:choose|select|pick|go\s+with)))"
    r"\s*(?:(?i:option|choice)\s*)?" + _L
)
_IS_CORRECT = re.compile(
    r"(?<![\w'])" + _L + r"\s+(?i:is)\s+(?:(?i:the)\s+)?"
    r"(?i:correct|right|best|closest|most\s+(?:likely|accurate|appropriate|plausible|suitable))\b"
)
# A letter followed by another offered as an alternative: "A or B", "B/C", "A, B", "A and B", "A B".
# A second letter after a bare space counts only when nothing but punctuation, another letter or the end follows
# it ("A B", "A B."): in "C) A blue square" the A is the article of the option's text.
_ALT = re.compile(
    r"(?:\s*(?:,|/|&|(?i:\bor\b)|(?i:\band\b))\s*(?:(?i:option)\s*)?[(\[]?([A-J])(?![\w'])"
    r"|\s+[(\[]?([A-J])[)\]]?(?=\s*(?:$|[.,;:!?/&]|[(\[]?[A-J](?![\w']))))"
)
# The span starts with a letter: "B", "(B)", "B.", "B) red", "B: red", "B - the red circle", "B, because",
# "D. Both A and B." (a lettered option with its text: the letters inside the text are not alternatives).
_HEAD = re.compile(r"\s*[(\[]?([A-J])[)\]]?(?![\w'])")
_HEAD_END = re.compile(r"[.:,)\]]|\s|$|[-\u2013\u2014]")
_PRONOUN = re.compile(r"\s+[a-z']|'")
# The span is one letter in any case ("b", "(b)", "b."): nothing else to confuse it with.
_LONE = re.compile(r"[(\[]?([A-Ja-j])[)\].:]?")
# The span ends with a letter on its own: "... so the person holds the cup. B"
_TAIL = re.compile(r"(?:^|[\s:>])[(\[]?([A-J])[)\]]?[.!]?$")
_TAIL_HEDGE = re.compile(
    r"(?<![\w'])([A-J])[)\]]?\s*(?:,|/|&|(?i:\bor\b)|(?i:\band\b))\s*[(\[]?([A-J])[)\]]?[.!]?$"
)
# "option B" mentioned without a statement (the weakest reading, after head and tail letters).
_OPTION = re.compile(r"\b(?i:option)\s*" + _L)
_MARKUP = re.compile(r"\*+|`+|__+")

# One time value: clock form (m:ss, h:mm:ss, fractions allowed) or a decimal number, optional unit.
_TIME = r"(\d{1,2}:\d{1,2}:\d{1,2}(?:\.\d+)?|\d+:\d{1,2}(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
_UNIT = r"\s*(?:s|sec|secs|second|seconds)?"
_SEP = r"\s*(?:,|-|–|—|~|to|and|until|till)\s*"
_INTERVAL = re.compile(_TIME + _UNIT + _SEP + _TIME + _UNIT + r"(?![\d:])", re.IGNORECASE)
# "Start time: 24.3 seconds / End time: 30.4 seconds", "starts at 24.3s and ends at 30.4s".
_START_END = re.compile(
    r"\bstart(?:s|ing)?(?:\s+time)?(?:\s+(?:is|at|of))?\s*[:=]?\s*(?:at\s+)?"
    + _TIME
    + _UNIT
    + r".{0,40}?\bend(?:s|ing)?(?:\s+time)?(?:\s+(?:is|at|of))?\s*[:=]?\s*(?:at\s+)?"
    + _TIME
    + _UNIT
    + r"(?![\d:])",
    re.IGNORECASE | re.DOTALL,
)


@dataclass(frozen=True)
class AccuracyResult:
    score: float  # in [0, 1]
    reason: str | None = None  # why the score is 0 without comparing (None: the prediction was parsed)
    parsed: Any = None  # what was compared: the letter, the (start, end) pair, the normalized text
    source: str = "rule"  # "exact", "mcq", "tvg", "f1", "judge", "f1_fallback"


def extract_answer_text(text: str) -> str | None:
    """Body of the last complete ``<answer>…</answer>`` (stripped), or None."""
    return extract_answer(text)


def answer_span(text: str) -> str:
    """The part of a prediction that is its answer: the last ``<answer>`` body, else the text without
    think / call / tool-response blocks and stray tags (plain answers from the eval's no-tag modes)."""
    body = extract_answer_text(text)
    if body is not None:
        return body
    span = _TAG.sub(" ", _STRIP_BLOCKS.sub(" ", text)).strip()
    unclosed = _UNCLOSED_THINK.search(text)
    if not span and unclosed:  # only reasoning, never closed: it is all the reply says (lmms-eval reads it)
        return _TAG.sub(" ", _STRIP_BLOCKS.sub(" ", unclosed.group(1))).strip()
    return span


def parse_mcq_letter(text: str) -> str | None:
    """The option letter (A-J, upper-case) a prediction commits to, or None (no letter, or hedged)."""
    letter, _ = read_mcq_letter(text)
    return letter


def read_mcq_letter(text: str) -> tuple[str | None, str | None]:
    """(letter, None) or (None, reason: ``empty_answer`` / ``hedged_letter`` / ``unparseable_letter``).

    The eval scores multiple choice by this letter alone, as ``accuracy_reward`` does for a letter gold."""
    return _mcq_letter(answer_span(text))


def statement_letters(text: str) -> list[str]:
    """The letters of every committing statement in ``text``, in order ("the answer is A … the answer is B" ->
    ["A", "B"]); the last one is the reading when there are several."""
    s = _MARKUP.sub("", unicodedata.normalize("NFKC", text))
    found = sorted([*_STATEMENT.finditer(s), *_IS_CORRECT.finditer(s)], key=lambda m: m.start(1))
    return [m.group(1) for m in found]


def _hedged(span: str, end: int, letter: str) -> bool:
    """Another letter, different from ``letter``, offered as an alternative right after ``end``."""
    alt = _ALT.match(span, end)
    return alt is not None and (alt.group(1) or alt.group(2)) != letter


def _mcq_letter(span: str) -> tuple[str | None, str | None]:
    """(letter, reason when None). Readings, strongest first: the last committing statement, a leading
    letter, the lone letter, a trailing letter, the last "option X". Refused (``hedged_letter``) only when
    the reading names two different letters as the answer ("A or B", "the answer is B/C")."""
    s = _MARKUP.sub("", unicodedata.normalize("NFKC", span)).strip()
    if not s:
        return None, "empty_answer"
    found = list(_STATEMENT.finditer(s)) + list(_IS_CORRECT.finditer(s))
    if found:
        last = max(found, key=lambda m: m.start(1))
        letter = last.group(1)
        return (None, "hedged_letter") if _hedged(s, last.end(), letter) else (letter, None)
    head = _HEAD.match(s)
    if head:
        letter = head.group(1)
        if _hedged(s, head.end(), letter):
            return None, "hedged_letter"
        pronoun = letter == "I" and _PRONOUN.match(s, head.end())  # "I think it is red" names no option
        if _HEAD_END.match(s, head.end()) and not pronoun:
            return letter, None
    lone = _LONE.fullmatch(s.rstrip("."))
    if lone:
        return lone.group(1).upper(), None
    tail_hedge = _TAIL_HEDGE.search(s)
    if tail_hedge and tail_hedge.group(1) != tail_hedge.group(2):
        return None, "hedged_letter"
    tail = _TAIL.search(s)
    if tail:
        return tail.group(1), None
    found = list(_OPTION.finditer(s))
    if found:
        letter = found[-1].group(1)
        return (None, "hedged_letter") if _hedged(s, found[-1].end(), letter) else (letter, None)
    return None, "unparseable_letter"


def parse_interval(text: str) -> tuple[float, float] | None:
    """(start, end) seconds of the FIRST interval written in the answer span (as lmms-eval's Charades scorer
    and the release's driver read it), or None.

    Accepted: ``s, e``, ``s - e``, ``s to e``, ``s–e``, ``[s, e]``, ``m:ss`` / ``h:mm:ss`` values, a unit
    after each value ("2.5s - 5 seconds"), and the two-line form "Start time: 24.3 seconds / End time: 30.4
    seconds". A reversed pair is swapped; values must be finite and below a week (``parse_time``'s bound)."""
    span = answer_span(text)
    found = sorted([*_INTERVAL.finditer(span), *_START_END.finditer(span)], key=lambda m: m.start())
    for match in found:
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


def question_kind(question_type: str | None) -> QuestionType:
    """``mcq`` and ``tvg`` as given; anything else is open-ended (docs/method.md §2.4)."""
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
