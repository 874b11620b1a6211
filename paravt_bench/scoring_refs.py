"""The two references our answer scoring is checked against, per benchmark and per sample.

1. **lmms-eval 0.7.3's own task code** (``lmms_eval/tasks/<task>/utils.py``), from the side site
   ``.venv-bench/lmms-eval-site`` that ``scripts/setup.sh`` fills (``pip install --target … --no-deps
   lmms-eval==0.7.3 loguru==0.7.3``; ``PARAVT_LMMS_EVAL_SITE`` overrides the path). Nothing is installed into
   the venv. How it is imported, and why:

   - ``lmms_eval/__init__.py`` and ``lmms_eval/tasks/__init__.py`` import the whole evaluator (transformers,
     datasets, accelerate, …). The task scorers need only their own files, so the three packages on the way
     (``lmms_eval``, ``lmms_eval.tasks``, ``lmms_eval.tasks._task_utils``) are registered as bare package
     shells whose ``__path__`` is the real directory: every module below is lmms-eval's file, run unchanged.
   - Imports the scorers never use are stubbed while a task module loads, and only those: ``cv2`` and
     ``datasets`` (Video-MME's video/subtitle helpers), ``decord`` and ``lmms_eval.utils`` (LongVideoBench's
     frame loader and cache-dir helper; ``lmms_eval.utils`` would import transformers and pytz).
   - LongVideoBench's parser answers a random letter when it finds none; that call is replaced by a marker so
     the comparison can tell a guess from a reading (the random draw is not a reading of the answer).

2. **The release's rule**: docs/method.md §7 (the final reply is scored whole) and the release's eval driver
   (``paravt/eval/utils.py``: ``extract_letter``, ``extract_time_from_response``, ``temporal_iou``), written
   here from its documented behaviour, with its last-resort guesses (the reply's first character; "any two
   numbers") marked as guesses.

A reference's letter that does not stand on its own in the text (read from inside a word, e.g. the "B" of
"Based") is counted as a guess too. ``compare()`` scores every corpus item by ours and by both references.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import re
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paravt_core.eval.benchmarks import Sample
from paravt_core.eval.scoring import score_sample
from paravt_core.rewards.accuracy import parse_mcq_letter, statement_letters

ROOT = Path(__file__).resolve().parent.parent
LMMS_EVAL_VERSION = "0.7.3"
GUESS = "<guess>"  # what a reference returns when it guessed instead of reading the answer

MCQ_BENCHMARKS = ("videomme", "lvbench", "mlvu", "longvideobench", "mmvu")
BENCHMARKS = (*MCQ_BENCHMARKS, "charades")
# The option texts the corpus's outputs talk about (scoring_corpus.OPTION_TEXT), plus a fifth.
OPTIONS = {"A": "a red circle", "B": "a blue square", "C": "a green triangle",
           "D": "both the circle and the square", "E": "none of the shapes"}  # fmt: skip
LETTERS_OF = {
    "videomme": "ABCD",
    "lvbench": "ABCD",
    "mlvu": "ABCD",
    "longvideobench": "ABCDE",
    "mmvu": "ABCDE",
}


def site_dir() -> Path:
    return Path(os.environ.get("PARAVT_LMMS_EVAL_SITE", ROOT / ".venv-bench" / "lmms-eval-site"))


class ReferenceMissing(RuntimeError):
    """The lmms-eval side site is not set up (run scripts/setup.sh)."""


class _Stub(types.ModuleType):
    """A module whose every attribute is None: enough for ``from decord import VideoReader`` and for
    annotations such as ``datasets.Dataset`` evaluated when a function is defined."""

    def __getattr__(self, name: str) -> None:
        if name.startswith("__"):
            raise AttributeError(name)
        return None


@contextlib.contextmanager
def _stubbed(names: tuple[str, ...]) -> Iterator[None]:
    """Stub modules for imports the scorers never touch, only while a task module loads."""
    saved = {n: sys.modules.get(n) for n in names}
    for n in names:
        sys.modules[n] = _Stub(n)
    try:
        yield
    finally:
        for n, mod in saved.items():
            if mod is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = mod


def _load(site: Path, name: str, rel: str, stubs: tuple[str, ...] = ()) -> types.ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, site / "lmms_eval" / rel)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # the task utils import their siblings by these names
    with _stubbed(stubs):
        spec.loader.exec_module(module)
    return module


@dataclass
class LmmsEval:
    """lmms-eval's per-sample scorers. Each returns (what it read, score)."""

    videomme: types.ModuleType
    lvbench: types.ModuleType
    mlvu: types.ModuleType
    longvideobench: types.ModuleType
    mmvu: types.ModuleType
    charades: types.ModuleType
    strip_reasoning_tags: Callable[..., str]

    def prepare(self, text: str) -> str:
        # lmms-eval's evaluator strips reasoning blocks before the task sees the reply
        return self.strip_reasoning_tags(text, [["<think>", "</think>"]])

    def score_mcq(self, bench: str, text: str, gold: str) -> tuple[str, float]:
        pred = self.prepare(text)
        if bench == "videomme":
            doc = {"answer": gold, "domain": "Knowledge", "sub_category": "Astronomy",
                   "task_type": "Temporal Reasoning", "question_id": "001-1", "duration": "short",
                   "videoID": "v"}  # fmt: skip
            out = self.videomme.videomme_process_results(doc, [pred])["videomme_perception_score"]
            return out["pred_answer"], float(out["score"])
        if bench == "lvbench":
            read = self.lvbench.extract_characters_regex(pred)
            return read, float(
                self.lvbench.lvbench_process_results({"answer": gold}, [pred])["lvbench_score"]
            )
        if bench == "mlvu":
            out = self.mlvu.mlvu_process_results(
                {"task_type": "plotQA", "answer": gold, "question": "q"}, [pred]
            )
            d = out["mlvu_percetion_score"]
            return d["pred_answer"], float(d["pred_answer"] == d["answer"])
        if bench == "longvideobench":
            doc = {"id": "x_0", "duration_group": 15, "question_category": "S2E", "correct_choice": "ABCDE".index(gold),
                   **{f"option{i}": OPTIONS["ABCDE"[i]] for i in range(5)}}  # fmt: skip
            d = self.longvideobench.longvideobench_process_results(doc, [pred])["lvb_acc"]
            return d["parsed_pred"], float(d["parsed_pred"] == d["answer"])
        if bench == "mmvu":
            doc = {"answer": gold, "question_type": "multiple-choice", "choices": dict(OPTIONS)}
            correct = self.mmvu.evaluate_with_rule_based(doc, pred)
            m = re.search(r"\b([A-E])\b", pred, re.IGNORECASE)  # what its own result log records as read
            return (m.group(1).upper() if m else ""), float(correct)
        raise ValueError(bench)

    def score_tvg(self, text: str, gold: list[float]) -> tuple[Any, float]:
        pred = self.prepare(text)
        key = f"v.mp4>>>caption>>>{gold}"  # the record key its aggregation parses the gold back from
        metrics = self.charades._temporal_grounding_compute_metrics([{key: pred}])
        return self.charades.extract_time(pred), metrics["mIOU"] / 100.0


def load_lmms_eval(site: Path | None = None) -> LmmsEval:
    site = site or site_dir()
    if not (site / "lmms_eval" / "tasks" / "_task_utils" / "mcq_extract.py").is_file():
        raise ReferenceMissing(f"lmms-eval {LMMS_EVAL_VERSION} not found in {site}; run scripts/setup.sh")
    for name, rel in (
        ("lmms_eval", ""),
        ("lmms_eval.tasks", "tasks"),
        ("lmms_eval.tasks._task_utils", "tasks/_task_utils"),
    ):
        if name not in sys.modules:
            shell = types.ModuleType(name)
            shell.__path__ = [str(site / "lmms_eval" / rel)]
            sys.modules[name] = shell
    sys.path.insert(0, str(site))  # loguru, lmms-eval's logger, lives in the side site too
    try:
        _load(site, "lmms_eval.tasks._task_utils.mcq_extract", "tasks/_task_utils/mcq_extract.py")
        _load(site, "lmms_eval.tasks._task_utils.file_utils", "tasks/_task_utils/file_utils.py")
        reasoning = _load(site, "lmms_eval.api_reasoning", "api/reasoning.py")
        refs = LmmsEval(
            videomme=_load(
                site, "lmms_eval.tasks.videomme.utils", "tasks/videomme/utils.py", ("cv2", "datasets")
            ),
            lvbench=_load(site, "lmms_eval.tasks.lvbench.utils", "tasks/lvbench/utils.py"),
            mlvu=_load(site, "lmms_eval.tasks.mlvu.utils", "tasks/mlvu/utils.py"),
            longvideobench=_load(
                site,
                "lmms_eval.tasks.longvideobench.utils",
                "tasks/longvideobench/utils.py",
                ("decord", "lmms_eval.utils"),
            ),  # fmt: skip
            mmvu=_load(site, "lmms_eval.tasks.mmvu.utils", "tasks/mmvu/utils.py"),
            charades=_load(site, "lmms_eval.tasks.charades_sta.utils", "tasks/charades_sta/utils.py"),
            strip_reasoning_tags=reasoning.strip_reasoning_tags,
        )
    finally:
        sys.path.remove(str(site))
    sys.modules["loguru"].logger.disable("lmms_eval")  # its per-sample INFO lines would drown the table
    # LongVideoBench answers random.choice(letters) when it reads nothing: mark the draw as a guess instead
    refs.longvideobench.random = types.SimpleNamespace(choice=lambda _letters: GUESS)
    return refs


# ------------------------------------------------------------------------------------------- the release's rule

_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_STANDALONE = re.compile(r"\b([A-J])\b")
_SAYS = re.compile(r"(?:answer|Answer)\s*(?:is|:)\s*([A-J])")


def release_letter(text: str) -> str:
    """The letter the release's driver reads from its final reply (``GUESS`` for its first-character fallback):
    the first ``<answer>`` body (one letter, else its first stand-alone A-J), else the whole reply (one letter,
    "answer is X" / "Answer: X", its first stand-alone A-J)."""
    t = text.strip()
    tag = _TAG.search(t)
    if tag:
        body = tag.group(1).strip()
        if len(body) == 1 and body in "ABCDEFGHIJ":
            return body
        if m := _STANDALONE.search(body):
            return m.group(1)
    if len(t) == 1 and t in "ABCDEFGHIJ":
        return t
    for pattern in (_SAYS, _STANDALONE):
        if m := pattern.search(t):
            return m.group(1)
    return GUESS if t else ""


_CLOCK_RANGE = re.compile(r"(\d+):(\d+(?:\.\d+)?)\s*[-–—]\s*(\d+):(\d+(?:\.\d+)?)")
_NUM_RANGE = re.compile(r"(\d+\.?\d*)\s*[-–—]\s*(\d+\.?\d*)")
_STARTS = re.compile(r"(?:start(?:ing)?|begin(?:ning)?)\s*(?:time)?[:\s]*(\d+\.?\d*)", re.I)
_ENDS = re.compile(r"(?:end(?:ing)?|finish(?:ing)?)\s*(?:time)?[:\s]*(\d+\.?\d*)", re.I)


def release_interval(text: str) -> list[float] | str | None:
    """The ``[start, end]`` the release's driver reads (``GUESS`` for its "first two numbers" fallback): the first
    ``m:ss - m:ss`` range (end after start, under an hour), else the first ``a - b`` range (end after start), in
    a ``<time>`` tag first, then the reply; else "start … end …" keywords."""
    if not text or not text.strip():
        return None
    tag = re.search(r"<time>([^<]+)</time>", text)
    for t in ([tag.group(1)] if tag else []) + [text]:
        if m := _CLOCK_RANGE.search(t):
            a, b = int(m.group(1)) * 60 + float(m.group(2)), int(m.group(3)) * 60 + float(m.group(4))
            if a < b < 3600:
                return [a, b]
        if m := _NUM_RANGE.search(t):
            a, b = float(m.group(1)), float(m.group(2))
            if b > a:
                return [a, b]
    starts, ends = _STARTS.findall(text), _ENDS.findall(text)
    if starts and ends:
        return [float(starts[0]), float(ends[0])]
    return GUESS if len(re.findall(r"(\d+\.?\d*)", text)) >= 2 else None


def release_iou(pred: list[float], gold: list[float]) -> float:
    inter = max(0.0, min(pred[1], gold[1]) - max(pred[0], gold[0]))
    union = max(pred[1], gold[1]) - min(pred[0], gold[0])
    return inter / union if union > 0 else 0.0


# ------------------------------------------------------------------------------------------------- comparison


@dataclass
class Row:
    benchmark: str
    item: dict[str, Any]
    ours: float
    ours_read: Any
    ours_reason: str | None
    lmms: float
    lmms_read: Any
    release: float
    release_read: Any

    @property
    def lmms_guessed(self) -> bool:
        return _guessed(self.lmms_read, self.item)

    @property
    def release_guessed(self) -> bool:
        return _guessed(self.release_read, self.item)

    @property
    def references_agree(self) -> bool:
        """Both references read the answer (no guess) and give the same score."""
        return not (self.lmms_guessed or self.release_guessed) and abs(self.lmms - self.release) < 1e-9


def _guessed(read: Any, item: dict[str, Any]) -> bool:
    if read == GUESS:
        return True
    if item["type"] == "mcq" and isinstance(read, str) and read:
        text = item["text"].replace("*", "")
        return re.search(rf"(?<![A-Za-z]){re.escape(read)}(?![A-Za-z])", text) is None
    return False


def _ours(bench: str, item: dict[str, Any]) -> tuple[float, Any, str | None]:
    if item["type"] == "mcq":
        sample = Sample(bench, item["id"], gold=item["gold"], qtype="mcq", letters=LETTERS_OF[bench])
    else:
        start, end = item["gold"]
        sample = Sample(
            bench, item["id"], gold=f"{start!r}, {end!r}", qtype="tvg", gold_interval=(start, end)
        )
    score = asyncio.run(score_sample(sample, item["text"]))
    return float(score.score or 0.0), score.parsed, score.reason


def compare(items: list[dict[str, Any]], refs: LmmsEval) -> list[Row]:
    """Every (benchmark, item) pair of the corpus scored three ways."""
    rows = []
    for item in items:
        benches = MCQ_BENCHMARKS if item["type"] == "mcq" else ("charades",)
        for bench in benches:
            ours, ours_read, reason = _ours(bench, item)
            if item["type"] == "mcq":
                lmms_read, lmms = refs.score_mcq(bench, item["text"], item["gold"])
                rel_read = release_letter(item["text"])
                release = float(rel_read == item["gold"])
            else:
                lmms_read, lmms = refs.score_tvg(item["text"], item["gold"])
                rel_read = release_interval(item["text"])
                release = release_iou(rel_read, item["gold"]) if isinstance(rel_read, list) else 0.0
            rows.append(Row(bench, item, ours, ours_read, reason, lmms, lmms_read, release, rel_read))
    return rows


# Where the two references agree and we differ ON PURPOSE. Anything else is a bug.
DELIBERATE = {
    "hedged": "two different options named as the answer: refused, not guessed (issue 21)",
    "revised": "the answer names different letters in turn: the last statement / last <answer> decides "
    "(issue 22 item 2, docs/method.md §7); both references take the first",
}


def deliberate(row: Row) -> str | None:
    """The key of ``DELIBERATE`` that explains why we differ from the references on this row, or None."""
    if row.ours_reason == "hedged_letter":
        return "hedged"
    if row.item["type"] == "mcq":
        tags = {parse_mcq_letter(f"<answer>{b}</answer>") for b in _TAG.findall(row.item["text"])} - {None}
        if len(tags) > 1 or len(set(statement_letters(row.item["text"]))) > 1:
            return "revised"
    return None


# Why the scores differ, by the corpus form (worked out from the three readings of each form's samples; LVB =
# lmms-eval's LongVideoBench parser, which takes the first capital A-E after dropping "The answer is"-style
# prefixes; MMVU = its rule scorer, right when the gold letter stands anywhere in the reply, any case).
FORM_NOTES = {
    "fullwidth": "a full-width letter: ours reads it (NFKC); the references read nothing",
    "lower": "a lone lower-case letter: ours reads it; LVB and the release do not (MMVU does)",
    "i_choose": "'I choose C': the release reads the pronoun I as option I",
    "answer_colon": "'Answer: B': LVB reads the A of 'Answer'",
    "bold_answer_colon": "'**Answer:** D': LVB reads the A of 'Answer'",
    "newline_answer": "'Answer:\\nB': LVB reads the A of 'Answer'",
    "is_correct": "'Based on the frames, C is correct': LVB reads the B of 'Based'",
    "revised": "'I thought the answer is D, but the answer is C': ours takes the last statement (issue 22 item 2)",
    "revised_tag": "two statements in one <answer>: ours takes the last; the release and LVB the first",
    "two_tags": "two <answer> tags: ours reads the last (docs/method.md §7); the release and LVB the first",
    "hedge_or": "'C or B': ours refuses a hedge; the references take one of its letters",
    "hedge_slash": "'B/A': ours refuses a hedge; the references take one of its letters",
    "hedge_either": "'either A or D': ours refuses a hedge; the references take one of its letters",
    "hedge_answer_is": "'the answer is A or C': ours refuses a hedge; the references take one of its letters",
    "tag_dash_text": "'C - a green triangle' with gold A: MMVU counts the article 'a' as the letter A",
    "tag_dot_text": "'A. a red circle' with gold D: MMVU matches the gold option's words in the reply",
    "text_only": "option text without a letter: MMVU counts the article 'a' as A; ours and the release read no letter",
    "article": "'the answer is a red circle': MMVU counts the article 'a' as A; ours reads no letter",
    "prose_trailing": "a trailing letter after a newline: MMVU matches the gold option's words in the reply",
    "pronoun": "'I think it is the red circle': MMVU matches the option's words; the release reads the pronoun I",
    "to": "'from 142.4s to 158.2s': the release finds no dash and falls back to guessing",
    "to_seconds": "'89.5 to 95.6 seconds': the release finds no dash and falls back to guessing",
    "start_end_slash": "'Start time: … / End time: …' on one line: lmms-eval takes one number per sentence and finds "
    "no pair",
    "starts_ends": "'starts at … and ends at …': lmms-eval finds no pair in one sentence; the release's keyword "
    "rule needs 'start' right before the number",
    "clock_hms": "'00:01:03 - 00:01:15': the release's m:ss rule reads '01:03 - 00:01' and then guesses",
    "reversed": "a reversed pair: ours and lmms-eval swap it; the release skips it and guesses",
    "think_then_answer": "an interval inside <think>: the release reads it (it does not strip reasoning)",
    "brackets": "'[140.3, 146.8]' (no dash): lmms-eval finds no pair; the release guesses",
    "clock": "'1:52.5 - 1:55.5': lmms-eval's clock rule needs whole seconds and reads [1, 52.5]",
}


def disagreement_reason(row: Row) -> str:
    """Why our score differs from a reference's, in one line (the form and what each side read)."""
    key = deliberate(row)
    if key is not None and row.references_agree:
        return DELIBERATE[key]
    if row.item["form"] in FORM_NOTES:
        return FORM_NOTES[row.item["form"]]
    parts = [f"form {row.item['form']}"]
    if row.lmms_guessed:
        parts.append("lmms-eval guessed")
    if row.release_guessed:
        parts.append("release guessed")
    parts.append(f"ours read {row.ours_read!r} ({row.ours_reason or 'parsed'})")
    parts.append(f"lmms-eval read {row.lmms_read!r}")
    parts.append(f"release read {row.release_read!r}")
    return "; ".join(parts)
