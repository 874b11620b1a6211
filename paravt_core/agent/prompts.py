"""Prompt sets: every text the environment shows the model, as versioned data files (docs/method.md §4.2).

A checkpoint only behaves as trained when it sees the texts it was trained on, so the texts are not code:
a *prompt set* is one YAML file (``prompt_sets/<name>.yaml`` in this package, or any path / ``s3://`` URI)
and every run records the set's ``checksum``. ``paravt-v1`` (our own wording of docs/method.md §4.2) is the default;
a user evaluating or continuing a published checkpoint passes that checkpoint's set with
``agent.prompt_set=/path/or/s3/uri.yaml`` and no code changes.

    from paravt_core.agent.prompts import load_prompt_set
    ps = load_prompt_set("paravt-v1")          # or a path / URI
    ps.checksum                                  # "sha256:..." of the texts (not of the file bytes)
    ps.system_prompt("agentic_general"); ps.subagent_prompt(3.0, 9.5); ps.forced_answer["mcq"].text

File format (``format: 1``): see ``prompt_sets/paravt-v1.yaml`` and the README section "Prompt sets".
System prompts substitute only the literal ``{tool_schema}``; the other texts are Python format strings
with the placeholders named in the file. The checksum is the SHA-256 of the set's fields as canonical JSON
(sorted keys, no whitespace), so comments and YAML layout do not change it but any text does.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from importlib import resources
from typing import Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from paravt_core.config import StrictModel

DEFAULT_PROMPT_SET = "paravt-v1"
PACKAGE_DIR = "prompt_sets"

PromptMode = Literal["agentic_general", "agentic_minimal", "direct", "reasoning"]
TOOL_MODES: tuple[str, ...] = ("agentic_general", "agentic_minimal")  # modes that offer the tool
ForcedAnswer = Literal["mcq", "tvg"]

# The one tool the environment executes. Its schema text lives in the prompt set; its name is code.
TOOL_NAME = "crop_video"

# Where a system prompt gets the schema line (a literal replacement: braces elsewhere stay as written).
SCHEMA_PLACEHOLDER = "{tool_schema}"


class SystemPrompts(StrictModel):
    agentic_general: str
    agentic_minimal: str
    direct: str
    reasoning: str


class SubagentTexts(StrictModel):
    prompt: str  # {start} {end} {duration} {question_block}
    question_block: str  # {question}
    truncation_mark: str
    empty_report: str


class ToolResponseTexts(StrictModel):
    open: str
    close: str
    separator: str


class ForcedAnswerText(StrictModel):
    text: str
    max_tokens: int = Field(ge=1)


class BenchmarkLayout(StrictModel):
    """How rows are laid out around the texts (a set without ``layout`` keeps the defaults, paravt-v1's).
    ``release-v1`` sets the released driver's choices, each named after what it reproduces."""

    strip_question: bool = True  # strip the row's question before "Question: " (the release does not)
    # as_given: Video-MME's options as the rows write them ("A. ..."); lettered: lettered again ("A. A. ...")
    videomme_options: Literal["as_given", "lettered"] = "as_given"
    # cue: one subtitle cue per line (its lines joined by a space); line: one subtitle line per line
    subtitle_lines: Literal["cue", "line"] = "cue"
    mlvu_question: Literal["first_line", "whole"] = "first_line"  # MLVU's stem: first line or the whole field
    # open: MMVU's open-ended items as "Question: ..." with a free answer; as_mcq: in the multiple-choice layout
    # with an empty options block, the letter instruction and the letter forced answer (the release's loader)
    mmvu_open_ended: Literal["open", "as_mcq"] = "open"


class BenchmarkTexts(StrictModel):
    """Eval only: how a benchmark row becomes the question the model sees (docs/method.md §7)."""

    mcq_question: str  # {question} {options} {hint}
    mcq_hint: str  # the letter instruction after the options
    subtitle_header: str  # the line before a video's subtitles (videomme_wsub)
    subtitle_block: str  # {header} {subtitles} {question}
    no_subtitles: str  # stands for the subtitles of a video that has none ("": the block is left out)
    charades_question: str  # {caption}
    # Optional (absent: paravt-v1's behaviour; absent fields do not enter the checksum, so adding them kept
    # the checksums of existing sets):
    mcq_hint_direct: str | None = None  # the letter instruction under protocol=direct (default: mcq_hint)
    lvbench_question: str | None = None  # {question} {hint}; default "Question: {question}\n{hint}"
    layout: BenchmarkLayout | None = None


class CropFramesRules(StrictModel):
    """How calls are answered under ``tool_mode=crop_frames`` (a set without ``crop_frames_rules`` keeps the
    defaults, paravt-v1's). ``release-v1`` sets the released driver's choices. The call records keep the truth
    either way: the served window, the real failure reason, and ``dropped`` for calls that got no response."""

    # the times crop_frames_note shows: the window served (clamped to the video) or the times asked for
    note_times: Literal["served", "requested"] = "served"
    # the whole block text for a crop that gave no frames, {start} {end} the times asked for as
    # parsing.lenient_window reads them (no errors.prefix);
    # None: errors.prefix + the crop's own error message
    crop_failed: str | None = None
    # calls beyond max_parallel: an error response each, or no response at all (left out of the turn)
    extra_calls: Literal["error", "drop"] = "error"
    # checked: a call naming another tool gets errors.unknown_tool; any: every parsed call is a crop
    tool_names: Literal["checked", "any"] = "checked"
    # strict: an unreadable or missing time is an error for the model; lenient: read as the released driver
    # does (parsing.lenient_window: unreadable -> 0.0, a missing end -> start + 10 s)
    times: Literal["strict", "lenient"] = "strict"
    # paravt: parsing.parse_tool_calls (every block answered, calls in closed think blocks are reasoning);
    # release: parsing.parse_tool_calls_as_released (the driver's reader: blocks it cannot read get no response
    # and a turn with none left is final; think blocks are read too)
    reader: Literal["paravt", "release"] = "paravt"


class ErrorTexts(StrictModel):
    prefix: str
    too_many_calls: str  # {limit}
    unknown_tool: str  # {name}
    subagent_failed: str  # {reason}


# Placeholders each format-string field must accept (checked when a set is loaded, so a typo in a user's
# file fails at load time with the field's name, not in the middle of an episode).
_PLACEHOLDERS: dict[str, dict[str, object]] = {
    "question_suffix": {"basename": "v.mp4"},
    "subagent.prompt": {"start": "00:00", "end": "00:10", "duration": 10.0, "question_block": ""},
    "subagent.question_block": {"question": "q"},
    "crop_frames_note": {"count": 2, "start": 0.0, "end": 1.0},
    "crop_frames_rules.crop_failed": {"start": 0.0, "end": 1.0},
    "errors.too_many_calls": {"limit": 5},
    "errors.unknown_tool": {"name": "x"},
    "errors.subagent_failed": {"reason": "r"},
    "benchmark.mcq_question": {"question": "q", "options": "A. x", "hint": "h"},
    "benchmark.subtitle_block": {"header": "h", "subtitles": "s", "question": "q"},
    "benchmark.charades_question": {"caption": "c"},
    "benchmark.lvbench_question": {"question": "q", "hint": "h"},
}
# Optional fields added after sets were published: left out of the checksum while absent (None).
_OPTIONAL_BENCHMARK_FIELDS = ("mcq_hint_direct", "lvbench_question", "layout")
_OPTIONAL_FIELDS = ("crop_frames_rules",)
_OPTIONAL_PATHS = (*_OPTIONAL_BENCHMARK_FIELDS, "crop_frames_rules.crop_failed")


class PromptSet(StrictModel):
    """One prompt set. Load with ``load_prompt_set``; the ``checksum`` identifies its texts."""

    format: Literal[1] = 1
    name: str = Field(min_length=1)
    description: str = ""
    tool_schema: str  # the JSON line shown inside <tools></tools>
    system: SystemPrompts
    question_suffix: str
    think_prefix: str
    subagent: SubagentTexts
    tool_response: ToolResponseTexts
    crop_frames_note: str
    crop_frames_rules: CropFramesRules | None = None  # optional: absent keeps paravt-v1's rules
    forced_answer: dict[ForcedAnswer, ForcedAnswerText]
    errors: ErrorTexts
    benchmark: BenchmarkTexts

    @field_validator("tool_schema")
    @classmethod
    def _schema_names_the_tool(cls, value: str) -> str:
        try:
            schema = json.loads(value)
            name = schema["function"]["name"]
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"tool_schema must be a JSON function schema ({err})") from None
        if name != TOOL_NAME:
            raise ValueError(f"tool_schema names {name!r}; the environment executes {TOOL_NAME!r}")
        return value

    @model_validator(mode="after")
    def _placeholders(self) -> PromptSet:
        if set(self.forced_answer) != {"mcq", "tvg"}:
            raise ValueError(f"forced_answer needs mcq and tvg, got {sorted(self.forced_answer)}")
        for path, values in _PLACEHOLDERS.items():
            text = self._field(path)
            if text == "None" and path.endswith(_OPTIONAL_PATHS):
                continue
            try:
                text.format(**values)
            except (KeyError, IndexError, ValueError) as err:
                raise ValueError(
                    f"{path}: bad placeholder ({type(err).__name__}: {err}); allowed: {', '.join(values)}"
                ) from None
        for mode in TOOL_MODES:
            if SCHEMA_PLACEHOLDER not in getattr(self.system, mode):
                raise ValueError(f"system.{mode} must contain {SCHEMA_PLACEHOLDER} (where the schema goes)")
        return self

    def _field(self, path: str) -> str:
        value: object = self
        for key in path.split("."):
            value = getattr(value, key, None)
        return str(value)

    @functools.cached_property
    def checksum(self) -> str:
        """``sha256:<hex>`` of the set's fields as canonical JSON: equal texts, equal checksum."""
        data = self.model_dump(mode="json")
        for key in _OPTIONAL_FIELDS:
            if data.get(key) is None:
                data.pop(key, None)
        for key in _OPTIONAL_BENCHMARK_FIELDS:
            if data["benchmark"].get(key) is None:
                data["benchmark"].pop(key, None)
        canonical = json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()

    # -- the texts, filled in ------------------------------------------------------------------------------

    def system_prompt(self, mode: PromptMode) -> str:
        """The system prompt of ``mode`` (schema line substituted); ``ValueError`` names the known modes."""
        if mode not in SystemPrompts.model_fields:
            raise ValueError(f"unknown prompt mode {mode!r}; known: {', '.join(SystemPrompts.model_fields)}")
        return getattr(self.system, mode).replace(SCHEMA_PLACEHOLDER, self.tool_schema)

    def question_with_suffix(self, question: str, video_basename: str) -> str:
        """The question as the main agent sees it in agentic modes (the release skips an existing suffix)."""
        if "video path" in question.lower():
            return question
        return question + self.question_suffix.format(basename=video_basename)

    def subagent_prompt(self, start: float, end: float, question: str | None = None) -> str:
        """The sub-agent's text for the window [start, end]; ``question`` only with ``see_question``."""
        block = self.subagent.question_block.format(question=question) if question else ""
        return self.subagent.prompt.format(
            start=clock(start), end=clock(end), duration=end - start, question_block=block
        )

    def tool_response_block(self, body: str) -> str:
        """One ``<tool_response>`` block around ``body``."""
        return f"{self.tool_response.open}{body}{self.tool_response.close}"

    def error_text(self, message: str) -> str:
        return self.errors.prefix + message

    def crop_frames_text(self, count: int, start: float, end: float) -> str:
        return self.crop_frames_note.format(count=count, start=start, end=end)

    @property
    def rules(self) -> CropFramesRules:
        """The crop_frames rules of this set (the defaults when it has none)."""
        return self.crop_frames_rules or CropFramesRules()


def clock(seconds: float) -> str:
    """``MM:SS`` (minutes may exceed 59), as in the sub-agent prompt."""
    total = max(0, int(seconds))
    return f"{total // 60:02d}:{total % 60:02d}"


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def packaged_prompt_sets() -> list[str]:
    """Names of the sets shipped in this package."""
    folder = resources.files(__package__).joinpath(PACKAGE_DIR)
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def parse_prompt_set(text: str | bytes, source: str = "<text>") -> PromptSet:
    """A prompt set from YAML (or JSON) text; ``ValueError`` with the source and the bad field."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(f"prompt set {source}: not YAML ({err})") from None
    if not isinstance(data, dict):
        raise ValueError(f"prompt set {source}: top level must be a mapping")
    try:
        return PromptSet.model_validate(data)
    except ValidationError as err:
        raise ValueError(f"prompt set {source}: {err}") from None


@functools.lru_cache(maxsize=32)
def load_prompt_set(name_or_uri: str = DEFAULT_PROMPT_SET) -> PromptSet:
    """A packaged set by name (``paravt-v1``), or a YAML file by path or URI (``s3://...``, ``file://``).

    Cached per argument: episodes of one run share one parsed set."""
    is_name = _NAME.match(name_or_uri) and not name_or_uri.endswith((".yaml", ".yml", ".json"))
    if is_name:
        path = resources.files(__package__).joinpath(PACKAGE_DIR, f"{name_or_uri}.yaml")
        if not path.is_file():
            known = ", ".join(packaged_prompt_sets())
            raise ValueError(
                f"unknown prompt set {name_or_uri!r}; packaged: {known} (or pass a file path/URI)"
            )
        return parse_prompt_set(path.read_text(), name_or_uri)
    from paravt_core import storage

    try:
        data = storage.read_bytes(name_or_uri)
    except FileNotFoundError:
        raise ValueError(f"prompt set {name_or_uri} does not exist") from None
    return parse_prompt_set(data, name_or_uri)


def system_prompt(mode: PromptMode, prompt_set: str = DEFAULT_PROMPT_SET) -> str:
    """Shortcut: the system prompt of ``mode`` in a set (the default set unless named)."""
    return load_prompt_set(prompt_set).system_prompt(mode)
