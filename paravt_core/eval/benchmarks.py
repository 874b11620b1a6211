"""The benchmark registry: how each benchmark's real rows become samples (SPEC §7).

Every entry knows its Hugging Face id and split (for real runs), how to read one row of its own schema, how to
build the question the model sees, where the video lives under the media root, and the metadata its metrics
group by. Row schemas, as the datasets publish them:

============== ================================================================================================
videomme       ``lmms-lab/Video-MME`` (test): ``videoID``, ``question_id``, ``duration`` (short/medium/long),
               ``domain``, ``task_type``, ``question``, ``options`` (["A. …", …]), ``answer`` (letter);
               video ``data/<videoID>.mp4``; subtitles ``subtitle/<videoID>.srt`` (``videomme_wsub``)
longvideobench ``longvideobench/LongVideoBench`` (validation): ``id``, ``video_path``, ``question``,
               ``option0..option4`` ("N/A" when unused), ``correct_choice`` (int), ``duration`` (s),
               ``duration_group``, ``question_category``; video ``videos/<video_path>``
lvbench        ``lmms-lab/LVBench``: the options are inside ``question`` as ``(A) …`` lines (or, in the migrated
               copy, an ``options`` list, lettered under the question as lmms-eval does); ``answer``
               (letter), ``uid``, ``question_type`` (list), ``time_reference``, ``video_path``; the original
               ``video_info.meta.jsonl`` nesting (``key`` + ``qa`` list) is read as well
mlvu           ``sy1998/MLVU_dev`` (test): ``video_name``, ``duration``, ``question`` (may carry the options
               after its first line), ``candidates`` (list), ``answer`` (letter or candidate text),
               ``task_type``, ``question_id``
mmvu           ``yale-nlp/MMVU`` (validation): ``id``, ``video`` (URL) or ``video_path``, ``question``,
               ``choices`` ({"A": …, …}, empty for open-ended), ``answer``, ``question_type``
               (multiple-choice / open-ended), ``metadata.subject``
charades       ``lmms-lab/charades_sta`` (test): ``video`` (file name), ``caption``, ``timestamp``
               ([start, end] seconds); video ``Charades_v1_480/<video>``
synthetic      ``paravt synth``'s ``eval/synthetic_eval.parquet``: ``id``, ``video`` (sentinel path),
               ``question``, ``options``, ``answer``, ``question_type``, ``duration``
============== ================================================================================================

A row that lacks a field its benchmark needs becomes a sample with ``error`` set: it is recorded and counted
as an error, never run, never dropped.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from paravt_core import storage
from paravt_core.agent.prompts import DEFAULT_PROMPT_SET, BenchmarkLayout, BenchmarkTexts, load_prompt_set

from .formats import aligned_subtitles, parse_srt, release_subtitle_text, subtitle_text

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


@dataclass(frozen=True)
class Benchmark:
    name: str
    hub_id: str
    split: str
    convert: Converter
    id_keys: tuple[str, ...]  # row fields that make the sample id, first present wins
    tool_prompt: str = "agentic_general"  # with-tool prompt mode (Charades: the bare envelope)
    published_key: str = ""  # column of SPEC §7's published table
    # how the release's driver sends the overview (driver.py --video_channel; scripts/reproduce_paravt_8b.sh):
    # decoded frames, or Charades' whole video as a file:// video_url that vLLM decodes server-side
    release_channel: str = "frames"


def _need(row: dict[str, Any], key: str) -> Any:
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
    """SPEC §7's multiple-choice layout ("Question: …\\nOptions:\\nA. …", then the letter instruction), as
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


# ---------------------------------------------------------------------------------------------------------
# Converters, one per schema


def _videomme(row: dict[str, Any], ctx: Context, subtitles: bool) -> Sample:
    options = [str(o) for o in _need(row, "options")]
    video_id = str(_need(row, "videoID"))
    block = lettered(options) if layout(ctx).videomme_options == "lettered" else "\n".join(options)
    t = ctx.texts
    prefix = None
    missing = release_missing_mp4(ctx, f"data/{video_id}")
    if subtitles and not missing:
        root = ctx.subtitles_root or media(ctx, "subtitle")
        join = "\n" if layout(ctx).subtitle_lines == "line" else " "
        srt = media(Context(root, texts=ctx.texts), f"{video_id}.srt")
        if ctx.subtitle_frames:
            text = _aligned(ctx, srt, video_file(ctx, f"data/{video_id}"), join)
        elif ctx.preset == "release":  # the release's positional reader (formats.release_srt_lines)
            text = release_subtitle_text(srt)
        else:
            text = subtitle_text(srt, join)
        # a set whose no_subtitles is "" leaves the block out for a video without subtitles (the release)
        prefix = text or t.no_subtitles or None
    question_text = _need(row, "question")

    def build(hint: str) -> str:
        question = mcq_question(ctx, question_text, block, hint)
        if prefix is None:
            return question
        return t.subtitle_block.format(header=t.subtitle_header, subtitles=prefix, question=question)

    sample = Sample(
        benchmark="",
        id=str(_need(row, "question_id")),
        video=media(ctx, f"data/{video_id}.mp4") if missing else video_file(ctx, f"data/{video_id}"),
        gold=letter_of(_need(row, "answer"), options),
        letters=LETTERS[: len(options)],
        meta={
            "duration": str(_need(row, "duration")),
            "task_type": row.get("task_type"),
            "domain": row.get("domain"),
        },
    )
    if missing:
        sample.error, sample.error_reason = missing, "video_not_found"
    return with_direct(ctx, sample, build)


def _aligned(ctx: Context, srt: str, video: str, join: str) -> str | None:
    """The cues of ``srt`` that cover ``ctx.subtitle_frames`` sampled frames of ``video`` (None: no file)."""
    try:
        raw = storage.read_bytes(srt).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None
    from paravt_core.video import api as video_api

    try:
        info = video_api.probe(video)
    except Exception as err:  # the frames the cues are aligned to cannot be known
        raise RowError(
            f"subtitle_mode=aligned needs the video's frame count ({type(err).__name__}: {err})"
        ) from None
    return aligned_subtitles(parse_srt(raw, join), info.fps, info.num_frames, ctx.subtitle_frames)


def _longvideobench(row: dict[str, Any], ctx: Context) -> Sample:
    options = []
    for i in range(5):
        value = row.get(f"option{i}")
        if value is None or str(value) == "N/A":
            break
        options.append(str(value))
    if not options and isinstance(row.get("candidates"), list):  # the json-only copy (lvb_val.json)
        options = [str(c) for c in row["candidates"] if str(c) != "N/A"]
    if not options:
        raise RowError("missing field 'option0' (or 'candidates')")
    choice = _need(row, "correct_choice")
    question = _need(row, "question")
    sample = Sample(
        benchmark="",
        id=str(_need(row, "id")),
        video=media(ctx, f"videos/{_need(row, 'video_path')}"),
        gold=letter_of(int(choice), options),
        letters=LETTERS[: len(options)],
        meta={
            "duration_group": str(row.get("duration_group")),
            "question_category": row.get("question_category"),
        },
    )
    return with_direct(ctx, sample, lambda hint: mcq_question(ctx, question, lettered(options), hint))


_PAREN_OPTION = re.compile(r"^\(([A-J])\)\s*(.*)$")


def _lvbench(row: dict[str, Any], ctx: Context) -> Sample:
    question = str(_need(row, "question"))
    options = [m.group(2) for ln in question.splitlines() if (m := _PAREN_OPTION.match(ln.strip()))]
    listed = row.get("options")
    if not options and isinstance(listed, list | tuple) and listed:
        # the migrated copy lists the options apart: lettered "(A) ..." under the question, as lmms-eval 0.7.3's
        # lvbench_doc_to_text writes them; preset=release shows the question field as it is (the release's loader,
        # paravt/eval/utils.py lines 320-334 at cf55249: the question field, then the
        # instruction (line 329); no options list is read)
        options = [str(o) for o in listed]
        if ctx.preset != "release":
            question = question + "\n" + "\n".join(f"({LETTERS[i]}) {o}" for i, o in enumerate(options))
    if not options:
        raise RowError("question holds no (A)…(D) options and the row has no options list")
    qtypes = row.get("question_type") or []
    template = ctx.texts.lvbench_question or "Question: {question}\n{hint}"
    sample = Sample(
        benchmark="",
        id=str(_need(row, "uid")),
        video=media(ctx, str(_need(row, "video_path"))),
        gold=letter_of(_need(row, "answer"), options),
        letters=LETTERS[: len(options)],
        meta={"question_type": list(qtypes) if isinstance(qtypes, list | tuple) else [qtypes]},
    )
    return with_direct(ctx, sample, lambda hint: template.format(question=stem(ctx, question), hint=hint))


def _mlvu(row: dict[str, Any], ctx: Context) -> Sample:
    candidates = [str(c) for c in _need(row, "candidates")]
    whole = str(_need(row, "question"))
    first = whole.split("\n", 1)[0]  # options, when inlined, follow the first line
    asked = whole if layout(ctx).mlvu_question == "whole" else first
    sample = Sample(
        benchmark="",
        id=str(row.get("question_id") or f"{_need(row, 'video_name')}::{first}"),
        video=media(ctx, str(_need(row, "video_name"))),
        gold=letter_of(_need(row, "answer"), candidates),
        letters=LETTERS[: len(candidates)],
        meta={"task_type": str(_need(row, "task_type")), "duration": row.get("duration")},
    )
    return with_direct(ctx, sample, lambda hint: mcq_question(ctx, asked, lettered(candidates), hint))


def _mmvu(row: dict[str, Any], ctx: Context) -> Sample:
    qtype = str(_need(row, "question_type"))
    rel = row.get("video_path") or _need(row, "video")
    rel = str(rel)
    if "://" in rel and "/videos/" in rel:  # the published rows carry hub URLs; the copy is local
        rel = "videos/" + rel.split("/videos/", 1)[1]
    subject = (row.get("metadata") or {}).get("subject") if isinstance(row.get("metadata"), dict) else None
    sample = Sample(
        benchmark="",
        id=str(_need(row, "id")),
        video=media(ctx, rel),
        meta={"subject": subject, "kind": qtype},
    )
    if qtype == "multiple-choice":
        choices = _need(row, "choices")
        options = [str(choices[k]) for k in LETTERS if str(choices.get(k) or "").strip()]
        question = _need(row, "question")
        sample.gold = letter_of(_need(row, "answer"), options)
        sample.letters = LETTERS[: len(options)]
        return with_direct(ctx, sample, lambda hint: mcq_question(ctx, question, lettered(options), hint))
    sample.gold, sample.qtype = str(_need(row, "answer")), "oe"
    if layout(ctx).mmvu_open_ended == "as_mcq":  # the release: empty options block, letter asked and forced
        question = _need(row, "question")
        sample.forced = "mcq"
        return with_direct(ctx, sample, lambda hint: mcq_question(ctx, question, "", hint))
    sample.question = f"Question: {str(_need(row, 'question')).strip()}"
    return sample


def _charades(row: dict[str, Any], ctx: Context) -> Sample:
    stamp = _need(row, "timestamp")
    try:
        start, end = (float(v) for v in stamp)
    except (TypeError, ValueError):
        raise RowError(f"timestamp {stamp!r} is not a [start, end] pair") from None
    video = str(_need(row, "video"))
    caption = str(_need(row, "caption")).strip()
    return Sample(
        benchmark="",
        id=f"{video}::{caption}::{start:g}-{end:g}",
        video=media(ctx, f"Charades_v1_480/{video}"),
        question=ctx.texts.charades_question.format(caption=caption),
        gold=f"{start!r}, {end!r}",  # for reading; scoring uses gold_interval, the numbers themselves
        gold_interval=(start, end),
        qtype="tvg",
    )


def _synthetic(row: dict[str, Any], ctx: Context) -> Sample:
    qtype = str(_need(row, "question_type"))
    options = [str(o) for o in (row.get("options") or [])]
    return Sample(
        benchmark="",
        id=str(_need(row, "id")),
        video=media(ctx, str(_need(row, "video"))),
        question=str(_need(row, "question")),
        gold=str(_need(row, "answer")),
        qtype=qtype if qtype in ("mcq", "tvg") else "oe",
        letters=LETTERS[: len(options)],
        meta={"question_type": qtype},
    )


REGISTRY: dict[str, Benchmark] = {
    b.name: b
    for b in (
        Benchmark(
            "videomme",
            "lmms-lab/Video-MME",
            "test",
            lambda r, c: _videomme(r, c, False),
            ("question_id",),
            published_key="VMME",
        ),  # fmt: skip
        Benchmark(
            "videomme_wsub",
            "lmms-lab/Video-MME",
            "test",
            lambda r, c: _videomme(r, c, True),
            ("question_id",),
            published_key="VMME+sub",
        ),  # fmt: skip
        Benchmark(
            "longvideobench",
            "longvideobench/LongVideoBench",
            "validation",
            _longvideobench,
            ("id",),
            published_key="LVB",
        ),  # fmt: skip
        Benchmark("lvbench", "lmms-lab/LVBench", "train", _lvbench, ("uid",), published_key="LVBench"),
        Benchmark(
            "mlvu", "sy1998/MLVU_dev", "test", _mlvu, ("question_id", "video_name"), published_key="MLVU"
        ),
        Benchmark("mmvu", "yale-nlp/MMVU", "validation", _mmvu, ("id",), published_key="MMVU"),
        Benchmark(
            "charades",
            "lmms-lab/charades_sta",
            "test",
            _charades,
            ("video",),
            tool_prompt="agentic_minimal",
            published_key="Charades",
            release_channel="video_url",
        ),  # fmt: skip
        Benchmark("synthetic", "", "", _synthetic, ("id",)),
    )
}


def get(name: str) -> Benchmark:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown benchmark {name!r}; known: {', '.join(REGISTRY)}") from None


# A ``demo_data`` directory: fixture copies of the benchmarks plus this manifest, the ``benchmarks`` config
# entries that evaluate them with paths relative to the directory (written by paravt_core/synth/eval_fixtures.py).
DEMO_MANIFEST = "benchmarks.json"


def demo_entries(root: str) -> list[dict[str, Any]]:
    """The ``benchmarks`` entries of the ``demo_data`` directory ``root`` (local), paths made absolute."""
    path = os.path.join(root, DEMO_MANIFEST)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"demo_data {root} holds no benchmark fixtures ({DEMO_MANIFEST}); write them with "
            f"`paravt synth {root} --eval-fixtures` (`paravt demo` does) or leave demo_data empty"
        )
    with open(path) as f:
        listed = json.load(f)
    base = os.path.abspath(root)
    return [{k: v if k == "name" else os.path.join(base, v) for k, v in e.items()} for e in listed]


def flatten_lvbench(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """LVBench's ``video_info.meta.jsonl`` nests the questions of a video under ``qa``: one row per question,
    the video at ``<key>.mp4``."""
    out = []
    for row in rows:
        if isinstance(row.get("qa"), list):
            for qa in row["qa"]:
                out.append({"video_path": f"{row.get('key')}.mp4", "video_type": row.get("type"), **qa})
        else:
            out.append(row)
    return out


def to_samples(name: str, rows: list[dict[str, Any]], ctx: Context) -> list[Sample]:
    """Samples of ``rows``; a row the benchmark cannot use becomes a sample with ``error`` set. Ids are
    made unique (a repeated id gets ``#2``, ``#3``…) so exactly-once accounting is per row."""
    bench = get(name)
    if name == "lvbench":
        rows = flatten_lvbench(rows)
    samples: list[Sample] = []
    seen: dict[str, int] = {}
    for index, row in enumerate(rows):
        try:
            sample = bench.convert(row, ctx)
        except (RowError, KeyError, TypeError, ValueError, AttributeError) as err:
            key = next((str(row[k]) for k in bench.id_keys if row.get(k) not in (None, "")), f"row-{index}")
            sample = Sample(benchmark=name, id=key, error=f"row_error: {err}")
        sample.benchmark = name
        count = seen.get(sample.id, 0) + 1
        seen[sample.id] = count
        if count > 1:
            sample.id = f"{sample.id}#{count}"
        samples.append(sample)
    return samples
