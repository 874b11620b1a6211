"""Protocol constants of the ParaVT agent: tool schema, system prompts, sub-agent prompt, forced answers.

These strings are part of the model's input distribution: a checkpoint only behaves as trained when it
sees the texts it was trained on. Every constant therefore names the protocol it belongs to, and the whole
set is versioned by ``PROTOCOL_VERSION``; change a text only together with a new version.

Protocol ``paravt-v1`` (checkpoints ``ParaVT/ParaVT-8B``, its SFT start ``mwxely/ParaVT-8B-SFT``, and the
``Qwen3-VL-8B-Instruct`` tool baseline), per SPEC §4.1-§4.2:

- the tool schema is ``crop_video(video_path, start_time, end_time)``;
- the tool envelope is the Qwen/Hermes function-calling envelope (``# Tools`` ... ``<tools>`` ...
  ``<tool_call>``), used alone for Charades-STA (``agentic_minimal``);
- the general agentic prompt (``agentic_general``, multiple-choice benchmarks and RL) starts with the
  documented first sentence, carries the schema, an example call, the parallel-call note and the strict
  ``<think>`` / ``<tool_call>`` / ``<answer>`` format. SPEC quotes its first sentence and describes the
  rest; the connecting sentences here are our wording of that description.
- the forced final answers are quoted verbatim from SPEC §4.2.
"""

from __future__ import annotations

import json
from typing import Literal

PROTOCOL_VERSION = "paravt-v1"

PromptMode = Literal["agentic_general", "agentic_minimal", "direct", "reasoning"]
ForcedAnswer = Literal["mcq", "tvg"]

TOOL_NAME = "crop_video"

# paravt-v1: the JSON-Schema form of the only tool (SPEC §4.1). Key order matters: it is serialized into
# the system prompt with ``json.dumps`` defaults (", " and ": " separators).
TOOL_SCHEMA: dict = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Analyze a cropped video segment by sampling frames from a specific time range.",
        "parameters": {
            "type": "object",
            "properties": {
                "video_path": {"type": "string", "description": "Path to the video file"},
                "start_time": {"type": "number", "description": "Start time in seconds"},
                "end_time": {"type": "number", "description": "End time in seconds"},
            },
            "required": ["video_path", "start_time", "end_time"],
        },
    },
}
TOOL_SCHEMA_JSON = json.dumps(TOOL_SCHEMA)

# paravt-v1: the Qwen/Hermes tool envelope. Alone it is the ``agentic_minimal`` system prompt.
TOOL_ENVELOPE = (
    "# Tools\n\n"
    "You may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n"
    "<tools>\n"
    f"{TOOL_SCHEMA_JSON}\n"
    "</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n"
    "<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n'
    "</tool_call>"
)

# paravt-v1: example call shown in the general prompt (SPEC §4.2).
EXAMPLE_CALL_JSON = (
    '{"name": "crop_video", "arguments": {"video_path": "...", "start_time": 0, "end_time": 10}}'
)

# paravt-v1: ``agentic_general`` system prompt (ParaVT-8B on multiple-choice benchmarks, RL rollouts).
AGENTIC_GENERAL_SYSTEM = (
    "You are a video understanding agent that can analyze videos by cropping and examining specific "
    "segments.\n\n"
    "Available tool:\n"
    "<tools>\n"
    f"{TOOL_SCHEMA_JSON}\n"
    "</tools>\n\n"
    "To call the tool, write a JSON object inside <tool_call></tool_call> tags, for example:\n"
    "<tool_call>\n"
    f"{EXAMPLE_CALL_JSON}\n"
    "</tool_call>\n\n"
    "You may write multiple <tool_call> blocks in one turn to analyze several segments in parallel.\n\n"
    "Use strictly this format:\n"
    "<think>your reasoning</think>\n"
    "<tool_call>...</tool_call>  (zero or more)\n"
    "<answer>your final answer</answer>"
)

# paravt-v1: ``agentic_minimal`` system prompt (Charades-STA): the bare envelope.
AGENTIC_MINIMAL_SYSTEM = TOOL_ENVELOPE

# paravt-v1: no-tool eval modes (SPEC §7). Each carries its own answer-format instruction: ``direct`` asks for
# the bare answer in <answer> tags, ``reasoning`` for a <think> block first (the release swaps the two).
DIRECT_SYSTEM = (
    "You are a video understanding assistant. Answer the question about the video directly, without "
    "explaining your reasoning. Put only your final answer inside <answer></answer> tags."
)
REASONING_SYSTEM = (
    "You are a video understanding assistant. First reason step by step about the video inside "
    "<think></think> tags, then put only your final answer inside <answer></answer> tags."
)

SYSTEM_PROMPTS: dict[str, str] = {
    "agentic_general": AGENTIC_GENERAL_SYSTEM,
    "agentic_minimal": AGENTIC_MINIMAL_SYSTEM,
    "direct": DIRECT_SYSTEM,
    "reasoning": REASONING_SYSTEM,
}
TOOL_MODES = ("agentic_general", "agentic_minimal")  # prompt modes that offer the crop tool

# paravt-v1: appended to the question in agentic modes (the model copies the basename into video_path;
# the tool never opens that path, see SPEC §4.1).
QUESTION_SUFFIX = " The video path for this video is: {basename}"

# paravt-v1: PARA-GRPO ``constrained.think_prefix`` forces each assistant turn to start with this text.
THINK_PREFIX = "<think>\n"

# paravt-v1: text that precedes each overview frame: absolute time in the source video, one decimal.
FRAME_LABEL = "<{seconds:.1f} seconds>"

# paravt-v1: sub-agent prompt (one user message: the crop frames, then this text). The question line is
# our addition, sent only when ``subagent.see_question`` is on (off reproduces the release).
SUBAGENT_PROMPT = (
    "You are looking at a segment of a video from {start} to {end} (duration: {duration:.1f} seconds).\n\n"
    "The images are frames sampled in order from this segment.\n\n"
    "Write a concise, factual summary of the segment:\n"
    "- the key actions and events, and what changes across the frames\n"
    "- the important objects and people that are visible\n"
    "- the temporal flow: what happens first, then, and finally\n"
    "Describe what you see rather than interpreting it.{question_block}\n\n"
    "Summary:"
)
SUBAGENT_QUESTION_BLOCK = "\n\nThe main agent is answering this question about the whole video: {question}"

# paravt-v1: the sub-agent report is cut to this many tokens, then TRUNCATION_MARK is appended.
SUBAGENT_MAX_REPORT_TOKENS = 512
TRUNCATION_MARK = " [truncated]"

# paravt-v1: every tool result reaches the main agent inside one of these blocks; all blocks of a turn are
# joined with TOOL_RESPONSE_SEPARATOR into one user turn, in call order.
TOOL_RESPONSE_OPEN = "<tool_response>\n"
TOOL_RESPONSE_CLOSE = "\n</tool_response>"
TOOL_RESPONSE_SEPARATOR = "\n"

# paravt-v1: ``crop_frames`` (eval parity with the release driver): the crop frames themselves are the
# tool result; this line follows them inside the block.
CROP_FRAMES_NOTE = "{count} frames from {start:.1f}s to {end:.1f}s."

# paravt-v1: forced final answers (eval only, after the last allowed tool round), verbatim from SPEC §4.2.
FORCED_ANSWER_TEXT: dict[str, str] = {
    "mcq": "Based on the video and cropped segments above, answer with ONLY the letter.",
    "tvg": (
        "Based on the video and any cropped segments, provide your final answer about when the event "
        "happens. Use the format: 'The event happens in the X.X - Y.Y seconds.'"
    ),
}
FORCED_ANSWER_MAX_TOKENS: dict[str, int] = {"mcq": 64, "tvg": 128}

# Error texts returned to the model inside <tool_response> blocks (the episode continues).
ERROR_PREFIX = "Error: "
ERROR_TOO_MANY_CALLS = "at most {limit} tool calls are executed per turn; this call was skipped."
ERROR_UNKNOWN_TOOL = "unknown tool {name!r}; the only tool is " + TOOL_NAME + "."
ERROR_SUBAGENT_FAILED = "the segment could not be analyzed ({reason})."
EMPTY_REPORT = "(the sub-agent returned an empty report)"


def system_prompt(mode: PromptMode) -> str:
    """The system prompt of ``mode``; raises ``ValueError`` naming the known modes."""
    try:
        return SYSTEM_PROMPTS[mode]
    except KeyError:
        raise ValueError(f"unknown prompt mode {mode!r}; known: {', '.join(SYSTEM_PROMPTS)}") from None


def question_with_suffix(question: str, video_basename: str) -> str:
    """The question as the main agent sees it in agentic modes (the release skips an existing suffix)."""
    if "video path" in question.lower():
        return question
    return question + QUESTION_SUFFIX.format(basename=video_basename)


def clock(seconds: float) -> str:
    """``MM:SS`` (minutes may exceed 59), as in the sub-agent prompt."""
    total = max(0, int(seconds))
    return f"{total // 60:02d}:{total % 60:02d}"


def subagent_prompt(start: float, end: float, question: str | None = None) -> str:
    """The sub-agent's text for the window [start, end]; ``question`` only with ``see_question``."""
    block = SUBAGENT_QUESTION_BLOCK.format(question=question) if question else ""
    return SUBAGENT_PROMPT.format(
        start=clock(start), end=clock(end), duration=end - start, question_block=block
    )


def tool_response(body: str) -> str:
    """One ``<tool_response>`` block around ``body``."""
    return f"{TOOL_RESPONSE_OPEN}{body}{TOOL_RESPONSE_CLOSE}"


def error_text(message: str) -> str:
    return ERROR_PREFIX + message
