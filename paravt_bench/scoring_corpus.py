"""A fixed corpus of model outputs for the scoring oracle (``make bench-scoring``, tests/unit/test_eval_oracle.py).

Seeded, so every run sees the same corpus: ``corpus(seed=0, per_type=360)`` returns ``per_type`` multiple-choice
outputs and ``per_type`` grounding outputs, drawn from templates that cover what models actually write (answer
tags, bold, prose, trailing reasons, hedges, repeated statements, option text, lower case, full-width letters,
empty replies; intervals in several separators and time formats, "Start time / End time" lines, several
intervals, reversed pairs, no interval at all). Each item carries its gold (a letter, or ``[start, end]`` seconds
with two decimals, e.g. 130.25) and the template it came from, so disagreements can be grouped by form.

    python -m paravt_bench.scoring_corpus --out corpus.jsonl    # write it, one JSON object per line
"""

from __future__ import annotations

import argparse
import json
import random
from typing import Any

LETTERS = "ABCD"
OPTION_TEXT = {
    "A": "a red circle",
    "B": "a blue square",
    "C": "a green triangle",
    "D": "both the circle and the square",
}

# (form name, template). {L} the letter the output commits to, {M} another letter, {T} {L}'s option text.
MCQ_FORMS: list[tuple[str, str]] = [
    ("tag", "<answer>{L}</answer>"),
    ("tag_paren", "<answer>({L})</answer>"),
    ("tag_dot_text", "<answer>{L}. {T}</answer>"),
    ("tag_bold", "<answer>**{L}**</answer>"),
    ("bold", "**{L}**"),
    ("bare", "{L}"),
    ("bare_dot", "{L}."),
    ("lower", "{l}"),
    ("fullwidth", "{W}"),
    ("tag_reason", "<answer>{L}, because the shape changes colour after the cut.</answer>"),
    ("tag_dash_text", "<answer>{L} - {T}</answer>"),
    ("answer_is", "The answer is {L}."),
    ("answer_colon", "Answer: {L}"),
    ("bold_answer_colon", "**Answer:** {L}"),
    ("correct_option", "The correct option is {L}."),
    ("best_option", "The best option is {L}."),
    ("is_correct", "Based on the frames, {L} is correct."),
    ("i_choose", "I choose {L}."),
    ("paren_is_best", "({L}) is the best answer."),
    ("think_tag", "<think>The {t2} appears at 3 s, before the others.</think>\n<answer>{L}</answer>"),
    ("think_prose", "<think>Option {M} looks wrong.</think> The answer is {L}."),
    ("revised", "I thought the answer is {M}, but the answer is {L}."),
    ("revised_tag", "<answer>The answer is {M}. On reflection the answer is {L}.</answer>"),
    ("two_tags", "<answer>{M}</answer> Wait, let me check again. <answer>{L}</answer>"),
    ("option_word", "Option {L}"),
    ("prose_trailing", "The circle turns red after the cut, so the answer is\n{L}"),
    ("newline_answer", "Answer:\n{L}"),
    ("hedge_or", "<answer>{L} or {M}</answer>"),
    ("hedge_slash", "<answer>{L}/{M}</answer>"),
    ("hedge_either", "It is either {L} or {M}."),
    ("hedge_answer_is", "The answer is {L} or {M}."),
    ("text_only", "<answer>{T}</answer>"),
    ("no_letter", "I cannot tell from these frames which shape comes first."),
    ("article", "<answer>The answer is a {t2}.</answer>"),
    ("empty", ""),
    ("empty_tag", "<answer></answer>"),
    ("whitespace", "   \n "),
    ("pronoun", "<answer>I think it is the {t2}.</answer>"),
    # issue 34 item 6: forms lmms-eval reads and ours did not
    ("zh_answer_is", "答案是{L}"),
    ("zh_choose", "选{L}"),
    ("unclosed_think", "<think>The {t2} appears first, so the answer is {L}"),
    ("closest", "None of the options match exactly, but {L} is closest."),
]

# {S} {E}: the interval the output names (seconds); {s} {e}: as m:ss; {S2} {E2}: a second interval.
TVG_FORMS: list[tuple[str, str]] = [
    ("forced_format", "The event happens in the {S} - {E} seconds."),
    ("tag_dash", "<answer>{S} - {E}</answer>"),
    ("bare_dash", "{S}-{E}"),
    ("en_dash", "{S}–{E}"),
    ("to", "from {S}s to {E}s"),
    ("to_seconds", "{S} to {E} seconds"),
    ("brackets", "[{S}, {E}]"),
    ("start_end_lines", "Start time: {S} seconds\nEnd time: {E} seconds"),
    ("start_end_slash", "Start time: {S} seconds / End time: {E} seconds"),
    ("starts_ends", "The event starts at {S} and ends at {E}."),
    ("clock", "The event happens in {s} - {e}."),
    ("clock_hms", "<answer>{hs} - {he}</answer>"),
    ("reversed", "The event happens in the {E} - {S} seconds."),
    ("two_intervals", "The event happens in the {S} - {E} seconds, and again in {S2} - {E2} seconds."),
    (
        "think_then_answer",
        "<think>It could be {S2} - {E2}.</think>\nThe event happens in the {S} - {E} seconds.",
    ),
    ("no_interval", "I could not find the event in the video."),
    ("one_number", "The event happens around {S} seconds."),
    ("empty", ""),
]

FULLWIDTH = {c: chr(ord(c) + 0xFEE0) for c in "ABCDEFGHIJ"}


def _clock(t: float) -> str:
    return f"{int(t) // 60}:{t - 60 * (int(t) // 60):04.1f}"


def _hms(t: float) -> str:
    t = int(round(t))
    return f"{t // 3600:02d}:{t // 60 % 60:02d}:{t % 60:02d}"


def _mcq(rng: random.Random, i: int) -> dict[str, Any]:
    form, template = MCQ_FORMS[i % len(MCQ_FORMS)]
    gold = rng.choice(LETTERS)
    letter = gold if rng.random() < 0.5 else rng.choice(LETTERS)
    other = rng.choice([c for c in LETTERS if c != letter])
    text = template.format(L=letter, l=letter.lower(), M=other, W=FULLWIDTH[letter], T=OPTION_TEXT[letter],
                           t2=rng.choice(["red circle", "blue square", "green triangle"]))  # fmt: skip
    return {"type": "mcq", "form": form, "text": text, "gold": gold, "letter": letter}


def _tvg(rng: random.Random, i: int) -> dict[str, Any]:
    form, template = TVG_FORMS[i % len(TVG_FORMS)]
    start = round(rng.uniform(0, 150), 2)
    gold = [start, round(start + rng.uniform(2, 20), 2)]
    s = round(max(0.0, gold[0] + rng.uniform(-6, 6)), 1)
    e = round(s + rng.uniform(1, 20), 1)
    s2 = round(e + rng.uniform(5, 20), 1)
    text = template.format(
        S=s, E=e, S2=s2, E2=round(s2 + 4, 1), s=_clock(s), e=_clock(e), hs=_hms(s), he=_hms(e)
    )
    return {"type": "tvg", "form": form, "text": text, "gold": gold, "interval": [s, e]}


def corpus(seed: int = 0, per_type: int = 360) -> list[dict[str, Any]]:
    """``per_type`` multiple-choice and ``per_type`` grounding outputs (every form about equally often)."""
    rng = random.Random(seed)
    items = [_mcq(rng, i) for i in range(per_type)] + [_tvg(rng, i) for i in range(per_type)]
    for n, item in enumerate(items):
        item["id"] = f"{item['type']}-{n:04d}"
    return items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-type", type=int, default=360)
    parser.add_argument("--out", default="-")
    args = parser.parse_args()
    lines = "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in corpus(args.seed, args.per_type))
    if args.out == "-":
        print(lines, end="")
    else:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(lines)


if __name__ == "__main__":
    main()
