"""Questions, answers and tool-call traces for the synthetic data, all derived from the event schedule.

Every answer is computed from the ground-truth events, never typed by hand, so it is correct by
construction. Row builders return plain Python objects; ``tables.py`` writes them with explicit schemas.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from paravt_core.agent import prompts
from paravt_core.synth.scenes import COLOURS, SHAPES, Event

# The synthetic rows carry the real protocol texts, so SFT on them trains the prompts the agent uses.
TOOL_ENVELOPE = prompts.system_prompt("agentic_minimal")
AGENT_SYSTEM_PROMPT = prompts.system_prompt("agentic_general")

CHARADES_QUESTION = prompts.load_prompt_set().benchmark.charades_question  # the eval's grounding question

LETTERS = "ABCD"


def fmt_t(t: float) -> str:
    return f"{t:.1f}"


def tvg_answer(start: float, end: float) -> str:
    """Grounding gold in the RL convention: 'start, end' in seconds."""
    return f"{fmt_t(start)}, {fmt_t(end)}"


def probe_time(ev: Event) -> float:
    """A time on the 0.5 s grid strictly inside the event (events last at least 1 s)."""
    half_steps = int(round((ev.end - ev.start) / 0.5))
    return ev.start + 0.5 * max(1, half_steps // 2)


@dataclass(frozen=True)
class Video:
    """What a question needs to know about one synthetic video."""

    path: str  # sentinel path
    duration: float
    events: tuple[Event, ...]

    @property
    def basename(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass
class Question:
    text: str
    answer_text: str  # body of <answer> in SFT traces
    gold: str  # extra_info.answer / eval answer
    qtype: str  # mcq | tvg | oe
    reason: str  # last sentence of the final <think>
    target: int | None = None  # event index a zoom-in call should look at
    options: list[str] = field(default_factory=list)


def _mcq_options(correct: str, others: list[str], rng: random.Random) -> tuple[list[str], str]:
    """Four options: the correct label, distractors preferring labels seen elsewhere in the video."""
    pool = [o for o in others if o != correct]
    rng.shuffle(pool)
    extra = [f"{c} {s}" for c in COLOURS for s in SHAPES if f"{c} {s}" not in pool and f"{c} {s}" != correct]
    rng.shuffle(extra)
    options = [correct, *(pool + extra)[:3]]
    rng.shuffle(options)
    return options, LETTERS[options.index(correct)]


def q_which_at(v: Video, rng: random.Random) -> Question:
    k = rng.randrange(len(v.events))
    ev = v.events[k]
    t = probe_time(ev)
    options, letter = _mcq_options(ev.label, [e.label for e in v.events], rng)
    opts = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options))
    text = (
        f"Which shape is visible at {fmt_t(t)} seconds?\nOptions:\n{opts}\nAnswer with the option's letter."
    )
    reason = f"At {fmt_t(t)} s the {ev.label} is on screen, which is option {letter}."
    return Question(text, letter, letter, "mcq", reason, target=k, options=options)


def q_when(v: Video, rng: random.Random) -> Question:
    k = rng.randrange(len(v.events))
    ev = v.events[k]
    ans = tvg_answer(ev.start, ev.end)
    text = f"When does the {ev.label} appear? Answer with the start and end time in seconds, as 'start, end'."
    reason = f"The {ev.label} is visible from {fmt_t(ev.start)} s to {fmt_t(ev.end)} s."
    return Question(text, ans, ans, "tvg", reason, target=k)


def q_charades(v: Video, rng: random.Random) -> Question:
    k = rng.randrange(len(v.events))
    ev = v.events[k]
    text = CHARADES_QUESTION.format(caption=f"a {ev.label} appears")
    answer = f"The event happens in the {fmt_t(ev.start)} - {fmt_t(ev.end)} seconds."
    reason = f"The {ev.label} appears at {fmt_t(ev.start)} s and disappears at {fmt_t(ev.end)} s."
    return Question(text, answer, tvg_answer(ev.start, ev.end), "tvg", reason, target=k)


def q_windows(v: Video, rng: random.Random) -> Question:
    ans = "; ".join(f"{fmt_t(e.start)} - {fmt_t(e.end)}" for e in v.events)
    text = (
        "List every time window (in seconds) during which a shape is visible, in order, "
        "as 'start - end' separated by semicolons."
    )
    reason = f"There are {len(v.events)} windows with a shape."
    return Question(text, ans, ans, "oe", reason)


def q_colour_after(v: Video, rng: random.Random) -> Question:
    k = rng.randrange(len(v.events) - 1)
    ev, nxt = v.events[k], v.events[k + 1]
    text = f"What colour is the shape that appears right after the {ev.label}? Answer with one word."
    reason = f"After the {ev.label} ends at {fmt_t(ev.end)} s, the next shape is the {nxt.label}."
    return Question(text, nxt.colour, nxt.colour, "oe", reason, target=k + 1)


def q_count(v: Video, rng: random.Random) -> Question:
    n = str(len(v.events))
    text = "How many shapes appear one after another in the video? Answer with a number."
    return Question(text, n, n, "oe", f"I count {n} shapes in total.")


def q_first(v: Video, rng: random.Random) -> Question:
    ev = v.events[0]
    text = "Which shape appears first in the video? Answer with its colour and shape, e.g. 'red circle'."
    return Question(text, ev.label, ev.label, "oe", f"The first shape is the {ev.label}.", target=0)


Family = Callable[[Video, random.Random], Question]

# Question families per SFT split; row j of a split uses family j % len.
SFT_FAMILIES: dict[str, tuple[Family, ...]] = {
    "charades": (q_charades,),
    "geminicot": (q_colour_after, q_first),
    "longvideoreason": (q_which_at, q_count),
    "museg": (q_windows, q_when),
    "selftrace": (q_first, q_colour_after, q_when),
    "tvg": (q_when,),
    "videor1": (q_which_at, q_colour_after),
}


# ---------------------------------------------------------------- SFT messages


def text_part(text: str) -> dict:
    return {"type": "text", "text": text}


def video_part(path: str) -> dict:
    return {"type": "video_url", "video_url": {"url": path}}


def image_part(path: str) -> dict:
    return {"type": "image_url", "image_url": {"url": path}}


def describe_window(v: Video, a: float, b: float) -> str:
    """What a sub-agent would report for [a, b], from ground truth (times clipped to the window)."""
    seen = [e for e in v.events if e.start < b and e.end > a]
    head = f"Segment {fmt_t(a)}-{fmt_t(b)} s:"
    if not seen:
        return f"{head} only a plain grey background is visible; no shape appears."
    parts = [
        f"a {e.label} is visible from {fmt_t(max(a, e.start))} s to {fmt_t(min(b, e.end))} s" for e in seen
    ]
    return f"{head} " + "; ".join(parts) + "; otherwise the background is plain grey."


def tool_call(video_path: str, a: float, b: float) -> str:
    body = {"name": "crop_video", "arguments": {"video_path": video_path, "start_time": a, "end_time": b}}
    return f"<tool_call>\n{json.dumps(body)}\n</tool_call>"


def split_windows(duration: float, m: int) -> list[tuple[float, float]]:
    edges = [round(duration * k / m, 1) for k in range(m + 1)]
    return list(zip(edges[:-1], edges[1:], strict=True))


def _listing(v: Video) -> str:
    return ", ".join(f"the {e.label} ({fmt_t(e.start)}-{fmt_t(e.end)} s)" for e in v.events)


def sft_messages(v: Video, q: Question, system: str, style: int, image: str | None = None) -> list[dict]:
    """One SFT conversation. ``style``: 0 = one round of 2 parallel calls, 1 = 3 parallel calls,
    2 = two rounds (2 parallel calls, then one zoom-in), 3 = no tool call."""
    user_parts = [image_part(image)] if image else []
    user_parts += [video_part(v.path), text_part(f"{q.text} The video path for this video is: {v.basename}")]
    msgs: list[dict] = [
        {"role": "system", "content": [text_part(system)]},
        {"role": "user", "content": user_parts},
    ]
    if style == 3:
        final = f"<think>Looking at the video overview I see {_listing(v)}. {q.reason}</think>"
        msgs.append(
            {"role": "assistant", "content": [text_part(f"{final}\n<answer>{q.answer_text}</answer>")]}
        )
        return msgs

    rounds: list[list[tuple[float, float]]] = [split_windows(v.duration, 3 if style == 1 else 2)]
    if style == 2:
        ev = v.events[q.target if q.target is not None else 0]
        rounds.append([(max(0.0, ev.start - 0.5), min(v.duration, ev.end + 0.5))])
    for r, windows in enumerate(rounds):
        if r == 0:
            think = (
                f"The video lasts {fmt_t(v.duration)} s. I will inspect {len(windows)} segments in parallel "
                "to locate every shape."
            )
        else:
            think = "I will zoom in on the relevant shape to confirm its exact timing."
        calls = "\n".join(tool_call(v.basename, a, b) for a, b in windows)
        msgs.append({"role": "assistant", "content": [text_part(f"<think>{think}</think>\n{calls}")]})
        responses = "\n".join(
            f"<tool_response>\n{describe_window(v, a, b)}\n</tool_response>" for a, b in windows
        )
        msgs.append({"role": "user", "content": [text_part(responses)]})
    final = f"<think>The segments show {_listing(v)}. {q.reason}</think>"
    msgs.append({"role": "assistant", "content": [text_part(f"{final}\n<answer>{q.answer_text}</answer>")]})
    return msgs


def image_messages(image: str, colour: str, shape: str) -> list[dict]:
    """A videor1-style image row without tools: the colour of the single shape in a still image."""
    return [
        {
            "role": "user",
            "content": [image_part(image), text_part("What colour is the shape in this image? One word.")],
        },
        {
            "role": "assistant",
            "content": [
                text_part(f"<think>The image shows one {colour} {shape}.</think>\n<answer>{colour}</answer>")
            ],
        },
    ]


def image_video_question(v: Video, k: int) -> Question:
    """For an interleaved image + video row: when does the shape shown in the image appear?"""
    ev = v.events[k]
    ans = tvg_answer(ev.start, ev.end)
    text = "The image shows a shape. When does that shape appear in the video? Answer as 'start, end' in seconds."
    reason = (
        f"The image shows the {ev.label}, which is visible from {fmt_t(ev.start)} s to {fmt_t(ev.end)} s."
    )
    return Question(text, ans, ans, "tvg", reason, target=k)
