"""SQuAD-style answer normalization and token F1 (pure functions).

A module of its own so that the rule scorer (``accuracy``) and the LLM judge (``judge``, whose fallback is
token F1) both import it without importing each other."""

from __future__ import annotations

import re
import string
from collections import Counter

_PUNCT = str.maketrans({c: " " for c in string.punctuation + "–—‘’“”"})
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lower-case, punctuation -> spaces, articles dropped, whitespace collapsed (SQuAD-style)."""
    text = str(text).lower().translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


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
