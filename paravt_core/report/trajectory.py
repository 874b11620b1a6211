"""One RL trajectory shown in the report: the sampled episode with the most tool calls in one turn (the
method at work: parallel ``crop_video`` calls), its turns rendered as text, escaped, in Markdown and HTML.

Input: the RL stage's ``trajectories/step_*.jsonl`` (one sample per line, ``Sample.to_dict`` plus ``step``).
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

from paravt_core import storage

# Control characters (a random model writes them) shown as \\uXXXX: they would garble a terminal or page.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _visible(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def widest_turn(sample: dict[str, Any]) -> int:
    """The most tool-call blocks the sample's episode wrote in one turn."""
    return max((len(t.get("calls") or []) for t in sample["episode"].get("turns") or []), default=0)


def pick(samples: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The sample with the most calls in one turn; ties: more calls in all, then the earliest."""
    best, key = None, (-1, -1)
    for sample in samples:
        this = (widest_turn(sample), int(sample["episode"].get("calls_total") or 0))
        if this > key:
            best, key = sample, this
    return best


def load_samples(rl_output: str) -> list[dict[str, Any]]:
    """Every sampled trajectory the RL stage wrote, in step order."""
    uris = sorted(storage.list_uris(storage.join(rl_output, "trajectories"), suffix=".jsonl"))
    return [
        json.loads(line)
        for uri in uris
        for line in storage.read_bytes(uri).decode().splitlines()
        if line.strip()
    ]


def heading(sample: dict[str, Any]) -> str:
    """One line saying what is shown and, honestly, whether it has parallel calls."""
    width = widest_turn(sample)
    where = f"RL step {int(sample.get('step', 0)) + 1}, prompt {sample['episode'].get('row_id', '')}"
    if width >= 2:
        return f"{where}: {width} parallel tool calls in one turn (the sampled trajectory with the most)."
    if width == 1:
        return (
            f"{where}: no sampled trajectory has parallel tool calls (at most one call in a turn); shown: "
            "the one with the most calls."
        )
    return f"{where}: no sampled trajectory has a tool call; shown: the first one sampled."


def _result(call: dict[str, Any]) -> str:
    """The text the model got back for the call: the sub-agent's report, the frames served, or the error."""
    if call.get("ok") and call.get("report") is not None:
        return str(call["report"])
    if call.get("ok"):
        start, end = call.get("window") or (0.0, 0.0)
        return f"{call.get('frames', 0)} frames of {start:g}-{end:g} s"
    return f"error: {call.get('error') or 'the call failed'}"


def _call_label(call: dict[str, Any]) -> str:
    if not call.get("name"):
        return f"call {call.get('index', 0) + 1} (not parsed)"
    args = json.dumps(call.get("arguments"), sort_keys=True) if call.get("arguments") is not None else ""
    return f"call {call.get('index', 0) + 1}: {call['name']}({args})"


def _calls(n: int) -> str:
    return f"{n} tool call" + ("" if n == 1 else "s")


def _fence(text: str) -> str:
    """A Markdown code fence longer than any backtick run inside ``text``."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _md_code(text: str) -> str:
    fence = _fence(text)
    return f"{fence}text\n{text}\n{fence}\n"


def _md_inline(text: str) -> str:
    """Markdown-safe single-line text (table and emphasis characters escaped)."""
    return re.sub(r"([\\`*_\[\]<>|])", r"\\\1", " ".join(text.split()))


def trajectory_markdown(sample: dict[str, Any]) -> str:
    ep = sample["episode"]
    parts = ["## An RL trajectory\n", _md_inline(heading(sample)) + "\n"]
    parts.append(f"Question: {_md_inline(_visible(ep.get('question', '')))}\n")
    for turn in ep.get("turns") or []:
        calls = turn.get("calls") or []
        parts.append(f"### Turn {turn['turn'] + 1} ({_calls(len(calls))})\n")
        parts.append(_md_code(_visible(turn.get("text", ""))))
        for call in calls:
            parts.append(f"Tool result, {_md_inline(_visible(_call_label(call)))}:\n")
            parts.append(_md_code(_visible(_result(call))))
    answer = ep.get("answer")
    parts.append(
        f"Answer: {_md_inline(_visible(answer)) if answer is not None else 'none'} "
        f"(episode ended: {_md_inline(str(ep.get('finish_reason', '')))}; "
        f"reward {float(sample.get('reward', {}).get('total', 0.0)):.3g})\n"
    )
    return "\n".join(parts)


def trajectory_html(sample: dict[str, Any]) -> str:
    ep = sample["episode"]
    esc = lambda text: html.escape(_visible(str(text)))  # noqa: E731
    parts = [f"<h2>An RL trajectory</h2><p>{esc(heading(sample))}</p>"]
    parts.append(f"<p>Question: {esc(ep.get('question', ''))}</p>")
    for turn in ep.get("turns") or []:
        calls = turn.get("calls") or []
        parts.append(f"<h3>Turn {turn['turn'] + 1} ({_calls(len(calls))})</h3>")
        parts.append(f"<pre style='white-space:pre-wrap'>{esc(turn.get('text', ''))}</pre>")
        for call in calls:
            parts.append(f"<p>Tool result, {esc(_call_label(call))}:</p>")
            parts.append(f"<pre style='white-space:pre-wrap'>{esc(_result(call))}</pre>")
    answer = ep.get("answer")
    parts.append(
        f"<p>Answer: {esc(answer) if answer is not None else 'none'} (episode ended: "
        f"{esc(ep.get('finish_reason', ''))}; reward {float(sample.get('reward', {}).get('total', 0.0)):.3g})</p>"
    )
    return "".join(parts)
