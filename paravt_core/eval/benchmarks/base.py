"""What a benchmark is: the ``Benchmark`` type a benchmark module declares, and the helpers its converter uses.

A ``Benchmark`` owns everything that differs from one benchmark to the next: where its rows come from and how
one row becomes a ``Sample`` (``convert``, ``id_keys``, ``prepare``), the prompt mode of its with-tool
protocol, what it asks for (``answers``), its metrics beside the shared ones (``Metrics``), the published
numbers it is set against with their caveat and comparability rules (``Published``), and its fixture copy
(``Fixture``). The hubs (metrics, the report, ``--help``, the nightly pipeline, the synthetic fixtures) read
these fields and name no benchmark.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from paravt_core import storage
from paravt_core.agent.prompts import DEFAULT_PROMPT_SET, BenchmarkLayout, BenchmarkTexts, load_prompt_set

LETTERS = "ABCDEFGHIJ"
# Containers a benchmark's video may come in under its id (Video-MME ships .mp4, .MP4 and .mkv files).
VIDEO_EXTENSIONS = (".mp4", ".MP4", ".mkv", ".webm")


@dataclass
class Sample:
    """One question of one benchmark, ready for an episode (or an error to record)."""

    benchmark: str
    id: str
    video: str = ""  # local path or s3:// URI
    question: str = ""  # the benchmark's question text (the protocol adds its format instruction)
    gold: str = ""  # "B" / "12.0, 15.5" / free text
    qtype: str = "mcq"  # mcq | tvg | oe
    letters: str = ""  # valid option letters of an mcq sample
    meta: dict[str, Any] = field(default_factory=dict)  # what metrics group by (duration, task type, ...)
    error: str | None = None  # why the row cannot be run
    gold_interval: tuple[float, float] | None = None  # tvg: the gold [start, end] seconds as numbers
    direct_question: str = ""  # the question under protocol=direct when the set's hint differs there
    forced: str | None = ""  # forced answer kind (mcq / tvg / None); "": by qtype
    error_reason: str = "row_error"  # the record's error reason when ``error`` is set

    def question_for(self, protocol: str) -> str:
        """The question the model sees under ``protocol``."""
        return self.direct_question if protocol == "direct" and self.direct_question else self.question


class RowError(ValueError):
    """A row that lacks something its benchmark needs."""


@dataclass(frozen=True)
class Context:
    """Where a benchmark's media and subtitles live, and the prompt set's texts its questions are made of."""

    media_root: str
    subtitles_root: str = ""
    # Video-MME with subtitles: 0 = every cue; N = only the cues covering N uniformly sampled frames (lmms-eval's
    # "aligned" subtitles, N = the overview frames)
    subtitle_frames: int = 0
    texts: BenchmarkTexts = field(default_factory=lambda: load_prompt_set(DEFAULT_PROMPT_SET).benchmark)
    # "release": files read as the release's loader reads them (Video-MME only as <videoID>.mp4, its SRT reader,
    # LVBench's question field as it is); "paravt": ours
    preset: str = "paravt"


Converter = Callable[[dict[str, Any], Context], Sample]
Records = list[dict[str, Any]]


@dataclass(frozen=True)
class Breakdown:
    """A benchmark's own metrics beside the shared ones: values merged into (or replacing) the shared keys,
    and notes that say how its headline relates to the published and to lmms-eval's number."""

    values: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


# (records as the reader scores them, the shared metrics so far, the error rule) -> the benchmark's breakdown
BreakdownFn = Callable[[Records, Mapping[str, Any], str], Breakdown]
# (a benchmark's metrics) -> (css class, text) of a labelled number the report shows under ours, or None
AsideFn = Callable[[Mapping[str, Any]], tuple[str, str] | None]
# (results.json, the benchmark's name) -> why its headline cannot be set against the published one ("": it can)
RuleFn = Callable[[Mapping[str, Any], str], str]


@dataclass(frozen=True)
class Metrics:
    """How a benchmark's records become its numbers, beside the shared ones (``eval/metrics.py``)."""

    # the headline's measure: accuracy % (multiple choice, open-ended) or mIoU = mean IoU x 100 (time spans)
    headline: Literal["accuracy", "miou"] = "accuracy"
    breakdown: BreakdownFn | None = None
    scalars: tuple[str, ...] = ()  # its own numbers the KFP metrics log (beside the shared ones)
    grouped: str = ""  # its key of per-group accuracies the KFP metrics log as accuracy_<group>
    details: tuple[str, ...] = ()  # its keys the report's breakdowns table shows (before the shared ones)
    # (errors left out, errors scored as the release scores them) the report's cell shows when they differ;
    # empty: the headline's own pair (accuracy / accuracy_errors_as_wrong, miou / miou_errors_as_zero)
    denominators: tuple[str, str] | tuple[()] = ()
    aside: AsideFn | None = None


@dataclass(frozen=True)
class Published:
    """What the report sets our headline against (docs/method.md §7's table of the with-tool protocol)."""

    numbers: Mapping[str, float] = field(default_factory=dict)  # published model -> its number
    caveat: str = ""  # what a reader must know beside the difference
    rules: tuple[RuleFn, ...] = ()  # the benchmark's own comparability conditions (beside the shared ones)


@dataclass(frozen=True)
class Fixture:
    """The benchmark's copy in a ``demo_data`` directory: files in its real schema and layout, and videos of
    the synthetic schedules (``paravt_core/synth/eval_fixtures.py`` writes them; production code never
    imports ``paravt_core.synth``, so the benchmark says what to write and synth writes it)."""

    directory: str  # under the demo_data root (shared by the benchmarks of one dataset)
    source: str = ""  # the rows, under ``directory`` ("": the directory itself)
    media_root: str = ""  # the videos, under ``directory`` ("": the directory itself)
    subtitles: str = ""  # the subtitle directory, under ``directory`` ("": none in its config entry)
    files: Callable[[], dict[str, bytes]] | None = None  # file under ``directory`` -> its bytes
    videos: tuple[tuple[str, str], ...] = ()  # (file under ``directory``, schedule name: synth's A or B)
    synthesized: bool = False  # rows and media are ``paravt synth``'s own dataset (written by synth itself)


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: its rows and converter, its protocol's prompt, its metrics, published numbers, fixture."""

    name: str
    hub_id: str
    split: str
    convert: Converter
    id_keys: tuple[str, ...]  # row fields that make the sample id, first present wins
    tool_prompt: str = "agentic_general"  # with-tool prompt mode (Charades: the bare envelope)
    # how the release's driver sends the overview (driver.py --video_channel; scripts/reproduce_paravt_8b.sh):
    # decoded frames, or Charades' whole video as a file:// video_url that vLLM decodes server-side
    release_channel: str = "frames"
    answers: str = ""  # what it asks for (paravt eval --list-benchmarks)
    title: str = ""  # the dataset's own name, where a plot names it
    prepare: Callable[[Records], Records] | None = None  # the rows as the converter takes them (un-nesting)
    subtitles: bool = False  # its questions carry subtitles: the results record the config's subtitle_mode
    nightly: bool = True  # part of the nightly pipeline's default benchmark list
    metrics: Metrics = field(default_factory=Metrics)
    published: Published = field(default_factory=Published)
    fixture: Fixture | None = None


# ---------------------------------------------------------------------------------------------------------
# Helpers of the converters


def need(row: dict[str, Any], key: str) -> Any:
    """``row[key]``; a missing or blank field is a ``RowError``."""
    value = row.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise RowError(f"missing field {key!r}")
    return value


def media(ctx: Context, rel: str) -> str:
    """``rel`` under the media root (local path or s3:// prefix); absolute paths and URIs pass through."""
    rel = str(rel)
    if "://" in rel or os.path.isabs(rel) or not ctx.media_root:
        return rel
    return (
        storage.join(ctx.media_root, rel)
        if storage.is_s3(ctx.media_root)
        else os.path.join(ctx.media_root, rel)
    )


def lettered(options: list[str]) -> str:
    return "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options))


def layout(ctx: Context) -> BenchmarkLayout:
    return ctx.texts.layout or BenchmarkLayout()


def stem(ctx: Context, question: Any) -> str:
    """The row's question as the set lays it out (stripped unless the layout keeps it as written)."""
    return str(question).strip() if layout(ctx).strip_question else str(question)


def mcq_question(ctx: Context, stem_text: str, options_block: str, hint: str | None = None) -> str:
    """docs/method.md §7's multiple-choice layout ("Question: …\\nOptions:\\nA. …", then the letter instruction), as
    the prompt set writes it. ``hint``: another instruction than the set's ``mcq_hint`` (protocol=direct)."""
    t = ctx.texts
    return t.mcq_question.format(question=stem(ctx, stem_text), options=options_block,
                                 hint=t.mcq_hint if hint is None else hint)  # fmt: skip


def with_direct(ctx: Context, sample: Sample, build: Callable[[str], str]) -> Sample:
    """``sample`` with its question built by ``build(hint)``: the set's hint, and under protocol=direct the
    set's ``mcq_hint_direct`` when it has one (the release's driver asks differently without a tool)."""
    sample.question = build(ctx.texts.mcq_hint)
    if ctx.texts.mcq_hint_direct is not None:
        sample.direct_question = build(ctx.texts.mcq_hint_direct)
    return sample


def video_file(ctx: Context, stem: str) -> str:
    """``stem`` + the first of ``VIDEO_EXTENSIONS`` that exists under a local media root (``.mp4`` when none
    does, or when the root is remote: the episode then reports the missing file as a video error)."""
    first = media(ctx, stem + VIDEO_EXTENSIONS[0])
    if storage.is_s3(first) or "://" in first:
        return first
    for ext in VIDEO_EXTENSIONS:
        path = media(ctx, stem + ext)
        if os.path.exists(path):
            return path
    return first


def release_missing_mp4(ctx: Context, stem: str) -> str | None:
    """Under preset=release, why the video of ``stem`` is an error although we would run it: the release's
    loader names every Video-MME video ``<videoID>.mp4`` (``paravt/eval/utils.py`` lines 246 and 282 at cf55249)
    and ``eval_one`` answers a path that does not exist with the error "video not found" (``driver.py`` lines
    439-440), scored wrong; a copy named ``.MP4``/``.mkv``/``.webm`` is such a sample. None: not that case."""
    first = media(ctx, stem + VIDEO_EXTENSIONS[0])
    if ctx.preset != "release" or storage.is_s3(first) or "://" in first or os.path.exists(first):
        return None
    other = next((p for ext in VIDEO_EXTENSIONS[1:] if os.path.exists(p := media(ctx, stem + ext))), None)
    if other is None:
        return None  # no copy at all: the episode reports the missing file, as for every preset
    return (f"video not found: {first} (preset=release looks only for <videoID>.mp4, as the release's loader; "
            f"this copy is {os.path.basename(other)}, which preset=paravt runs)")  # fmt: skip


_LEADING_LETTER = re.compile(r"^\s*\(?([A-J])[.):]\s*")


def letter_of(answer: Any, options: list[str]) -> str:
    """The gold letter: a letter as given, an index, or the text of one option."""
    if isinstance(answer, int) and not isinstance(answer, bool):
        if 0 <= answer < len(options):
            return LETTERS[answer]
        raise RowError(f"answer index {answer} outside {len(options)} options")
    text = str(answer).strip()
    m = re.fullmatch(r"\(?([A-J])\)?\.?", text)
    if m and m.group(1) in LETTERS[: max(len(options), 1)]:
        return m.group(1)
    for i, option in enumerate(options):
        if text and _LEADING_LETTER.sub("", option).strip().lower() == text.lower():
            return LETTERS[i]
    raise RowError(f"answer {text!r} is neither an option letter nor an option")
