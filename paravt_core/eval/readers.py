"""The release's answer readers, our own code written from their behaviour (EvolvingLMMs-Lab/ParaVT at cf55249,
``paravt/eval/utils.py`` ``extract_letter`` lines 110-129, ``extract_time_from_response`` lines 132-169,
``temporal_iou`` lines 172-175; ``paravt/eval/driver.py`` ``_score`` lines 307-317). Under ``error_rule=release``
the headline is scored with these; our robust reader (``scoring.score_sample``) stays beside it.

What the release reads, and how it is scored:

- multiple choice (every MMVU item too: its loader marks them all ``is_mcq``): the letter of
  ``extract_letter(reply)`` must equal the gold answer string (stripped), nothing else: no option-range check,
  so an open-ended MMVU item is right only when its free-text gold happens to be that one character;
- ``extract_letter``: the reply stripped; the first ``<answer>`` body if it is one of A-J, else the first
  stand-alone A-J in that body; else the whole reply if it is one letter; else "answer is X" / "Answer: X";
  else the first stand-alone A-J anywhere (think text included); else the reply's first character;
- Charades: the IoU of ``extract_time_from_response(reply)`` with the gold (0 when it reads nothing):
  inside the first ``<time>`` tag, then the whole reply, the first ``m:ss - m:ss`` (end after start and under
  an hour), else the first ``a - b`` (end after start); else the first "start ... N" and "end ... N"; else the
  reply's first two numbers, whatever they are.
"""

from __future__ import annotations

import re
from typing import Any

LETTERS = "ABCDEFGHIJ"
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)  # utils.py line 113: the FIRST answer tag
_STANDALONE = re.compile(r"\b([A-J])\b")  # lines 118 and 126
_SAYS = re.compile(r"(?:answer|Answer)\s*(?:is|:)\s*([A-J])")  # line 123
_TIME_TAG = re.compile(r"<time>([^<]+)</time>")  # line 142
_CLOCK_RANGE = re.compile(r"(\d+):(\d+(?:\.\d+)?)\s*[-–—]\s*(\d+):(\d+(?:\.\d+)?)")  # lines 145-147
_NUMBER_RANGE = re.compile(r"(\d+\.?\d*)\s*[-–—]\s*(\d+\.?\d*)")  # line 153
_STARTS = re.compile(r"(?:start(?:ing)?|begin(?:ning)?)\s*(?:time)?[:\s]*(\d+\.?\d*)", re.I)  # lines 158-160
_ENDS = re.compile(r"(?:end(?:ing)?|finish(?:ing)?)\s*(?:time)?[:\s]*(\d+\.?\d*)", re.I)  # lines 161-163
_NUMBER = re.compile(r"(\d+\.?\d*)")  # line 166


def release_letter(text: str) -> str:
    """The letter the release reads from a multiple-choice reply (``extract_letter``; see the module docstring).
    Its last resort is the reply's first character, whatever it is ("" for an empty reply)."""
    text = text.strip()
    tag = _ANSWER.search(text)
    if tag:
        body = tag.group(1).strip()
        if len(body) == 1 and body in LETTERS:
            return body
        if found := _STANDALONE.search(body):
            return found.group(1)
    if len(text) == 1 and text in LETTERS:
        return text
    for pattern in (_SAYS, _STANDALONE):
        if found := pattern.search(text):
            return found.group(1)
    return text[:1]


def release_interval(text: str) -> list[float] | None:
    """The ``[start, end]`` the release reads from a grounding reply (``extract_time_from_response``), or None.
    Its fallbacks need not give start < end (the first two numbers of the reply)."""
    if not text or not text.strip():
        return None
    tag = _TIME_TAG.search(text)
    for part in ([tag.group(1)] if tag else []) + [text]:
        if clock := _CLOCK_RANGE.search(part):
            start = int(clock.group(1)) * 60 + float(clock.group(2))
            end = int(clock.group(3)) * 60 + float(clock.group(4))
            if start < end < 3600:
                return [start, end]
        if plain := _NUMBER_RANGE.search(part):
            start, end = float(plain.group(1)), float(plain.group(2))
            if end > start:
                return [start, end]
    starts, ends = _STARTS.findall(text), _ENDS.findall(text)
    if starts and ends:
        return [float(starts[0]), float(ends[0])]
    numbers = _NUMBER.findall(text)
    return [float(numbers[0]), float(numbers[1])] if len(numbers) >= 2 else None


def release_iou(pred: list[float], gold: list[float] | tuple[float, float]) -> float:
    """``temporal_iou``: intersection over the hull of both intervals (0 when the hull is empty)."""
    inter = max(0.0, min(pred[1], gold[1]) - max(pred[0], gold[0]))
    union = max(pred[1], gold[1]) - min(pred[0], gold[0])
    return inter / union if union > 0 else 0.0


def release_score(reply: str | None, qtype: str, gold: str, gold_interval: Any = None) -> tuple[float, Any]:
    """(score, what was read) of the final reply as the release scores it (``driver.py _score``): grounding
    items by IoU, every other item (MMVU's open-ended too) by letter equality with the stripped gold."""
    reply = reply or ""
    if qtype == "tvg":
        pred = release_interval(reply)
        if not pred or gold_interval is None:
            return 0.0, pred
        return release_iou(pred, list(gold_interval)), pred
    letter = release_letter(reply)
    return float(letter == str(gold).strip()), letter
