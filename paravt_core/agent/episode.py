"""The ParaVT episode: overview -> main agent -> parallel sub-agents -> ... -> answer (docs/method.md §4.4).

``await arun_episode(row, engine, cfg)`` runs one episode and returns an ``EpisodeResult``: the main
agent's append-only token trace, one trace per sub-agent, a record of every turn and call (parsed /
executed / succeeded, window, latency, report) and why the episode ended. RL and eval call the same
function; nothing here raises for a bad video, a bad generation or a failing engine — the episode ends with
a recorded ``finish_reason`` instead.

One turn: the main agent generates; if its text holds no call block the turn is final. Otherwise the first
``max_parallel`` calls run concurrently — all crops of the turn in one ``run_crops`` (decoded together),
then all sub-agents of the turn in **one** batched ``engine.generate`` — and one user turn with every
``<tool_response>`` in call order is appended. After ``max_turns`` tool rounds the next generation must
answer; calls in it end the episode (``tool_call_in_last_turn``).

Finish reasons: ``answer``, ``no_answer`` (final turn without ``<answer>``), ``empty_generation``,
``max_tokens`` / ``max_tokens_in_tag`` (cut by the token limit, inside an open tag for the latter; under the
release reader a cut reply that holds complete calls runs them and goes on, as the released driver does),
``tool_call_in_last_turn``, ``engine_error``, ``engine_refused`` (the server refused the request as it stands:
never retried), ``engine_timeout``, ``video_error`` (overview failed),
``context_overflow`` (no room left in ``max_context_tokens``), ``internal_error`` (an unexpected exception:
that episode ends with the exception type in ``error``, its siblings run on).

Every text the environment adds comes from the configured prompt set (``cfg.prompt_set``, checksum recorded
in ``cfg.prompt_set_checksum`` and in each result). In ``crop_frames`` mode (eval parity with the released
driver) each call's crop frames go back as their own user message, unlabelled, followed by a
``<tool_response>`` naming the frame count and window; the set's ``crop_frames_rules`` say which window (served
or requested), what a failed crop shows, whether calls beyond ``max_parallel`` get an error or nothing, and how
names and times are read (release-v1: the released driver's choices). The records keep the real window, the
real failure reason and ``dropped`` whatever the model was shown.

The frames (overview and crops) and the processor's pixel settings come from the config's frame path
(``cfg.frames``, one strategy per ``agent.frame_path``: ``agent.frame_paths``); nothing here names a path.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from paravt_core.engines.base import Completion, Engine, EngineRefused, SamplingParams
from paravt_core.video import api as video_api
from paravt_core.video.errors import CropError, VideoNotFoundError

from . import prompts
from .config import AgentConfig
from .conversation import Conversation, Part, image_part, text_part, video_url_part
from .parsing import (
    ParsedCall,
    extract_answer,
    lenient_window,
    open_tag_at_end,
    parse_tool_calls,
    parse_tool_calls_as_released,
)
from .segments import SegmentEncoder, Trace

log = logging.getLogger(__name__)

FINISH_REASONS = (
    "answer",
    "no_answer",
    "empty_generation",
    "max_tokens",
    "max_tokens_in_tag",
    "tool_call_in_last_turn",
    "engine_error",
    "engine_refused",
    "engine_timeout",
    "video_error",
    "context_overflow",
    "internal_error",
)


@dataclass
class EpisodeRow:
    """What an episode needs from a dataset row."""

    video: str
    question: str
    row_id: str = ""
    question_type: str | None = None
    nframes: int | None = None  # overview frame count for this row (nFrames gating); None: cfg

    @classmethod
    def coerce(cls, row: EpisodeRow | Mapping[str, Any]) -> EpisodeRow:
        if isinstance(row, EpisodeRow):
            return row
        video = row.get("video") or row.get("video_path") or row.get("video_uri")
        if not video or "question" not in row:
            raise ValueError(f"row needs 'video' and 'question' keys, got {sorted(row)}")
        return cls(
            video=str(video),
            question=str(row["question"]),
            row_id=str(row.get("row_id", row.get("id", ""))),
            question_type=row.get("question_type"),
            nframes=row.get("nframes"),
        )


@dataclass
class CallRecord:
    turn: int
    index: int
    form: str
    raw: str
    name: str | None = None
    arguments: dict[str, Any] | None = None
    parsed: bool = False  # the block gave a name and an arguments object
    executed: bool = False  # the crop tool ran on it
    ok: bool = False  # it produced a report (or frames)
    error: str | None = None  # why it was not served, when not ok (the model may see the set's wording)
    # the model got no response for it (crop_frames_rules: beyond max_parallel with extra_calls=drop, or a
    # block the release reader ignores)
    dropped: bool = False
    window: tuple[float, float] | None = None  # window served (end clamped to the video)
    frames: int = 0
    crop_s: float = 0.0
    subagent_s: float = 0.0
    report: str | None = None
    report_tokens: int = 0
    truncated: bool = False
    subagent: Trace | None = field(default=None, repr=False)

    @property
    def latency_s(self) -> float:
        return self.crop_s + self.subagent_s

    def to_dict(self) -> dict[str, Any]:
        keys = ("turn", "index", "form", "name", "arguments", "parsed", "executed", "ok", "error", "dropped",
                "frames")  # fmt: skip
        out = {k: getattr(self, k) for k in keys}
        out.update(
            window=list(self.window) if self.window else None,
            crop_s=round(self.crop_s, 4),
            subagent_s=round(self.subagent_s, 4),
            latency_s=round(self.latency_s, 4),
            report=self.report,
            report_tokens=self.report_tokens,
            truncated=self.truncated,
        )
        return out


@dataclass
class TurnRecord:
    turn: int
    text: str  # forced prefix + generated text (without the closing eos)
    tokens: int
    finish_reason: str  # the engine's: "stop" / "length"
    generation_s: float
    tools_s: float = 0.0
    calls: list[CallRecord] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "text": self.text,
            "tokens": self.tokens,
            "finish_reason": self.finish_reason,
            "generation_s": round(self.generation_s, 4),
            "tools_s": round(self.tools_s, 4),
            "calls": [c.to_dict() for c in self.calls],
        }


@dataclass
class EpisodeResult:
    row_id: str
    video: str
    question: str
    finish_reason: str = "no_answer"
    error: str | None = None
    answer: str | None = None  # body of the last <answer> of the episode
    final_text: str = ""  # the last generation's text
    nframes: int = 0
    overview_timestamps: list[float] = field(default_factory=list)
    overview_size: tuple[int, int] | None = None  # (height, width) of the overview frames
    turns: list[TurnRecord] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    prompt_set: str = ""
    prompt_set_checksum: str = ""
    # main-agent generations whose server-side prompt length differed from our exact count (chat engines)
    prompt_token_mismatches: int = 0
    conversation: Conversation | None = field(default=None, repr=False)

    @property
    def main(self) -> Trace | None:
        return self.conversation.trace if self.conversation else None

    @property
    def calls(self) -> list[CallRecord]:
        return [c for t in self.turns for c in t.calls]

    @property
    def subagent_traces(self) -> list[Trace]:
        return [c.subagent for c in self.calls if c.subagent is not None]

    @property
    def tool_rounds(self) -> int:
        return sum(1 for t in self.turns if any(c.executed for c in t.calls))

    def counts(self) -> dict[str, int]:
        calls = self.calls
        executed = sum(c.executed for c in calls)
        succeeded = sum(c.ok for c in calls)
        return {
            "calls_total": len(calls),
            "calls_parsed": sum(c.parsed for c in calls),
            "calls_executed": executed,
            "calls_succeeded": succeeded,
            "calls_failed": executed - succeeded,
            "calls_rejected": len(calls) - executed,
        }

    def assistant_text(self) -> str:
        """Every main-agent turn (forced prefix included), joined by newlines: what format rewards read."""
        return "\n".join(t.text for t in self.turns)

    def to_dict(self) -> dict[str, Any]:
        main = self.main
        return {
            "row_id": self.row_id,
            "video": self.video,
            "question": self.question,
            "finish_reason": self.finish_reason,
            "error": self.error,
            "answer": self.answer,
            "final_text": self.final_text,
            "nframes": self.nframes,
            "overview_timestamps": self.overview_timestamps,
            "overview_size": list(self.overview_size) if self.overview_size else None,
            "tool_rounds": self.tool_rounds,
            **self.counts(),
            "turns": [t.to_dict() for t in self.turns],
            "timings": {k: round(v, 4) for k, v in self.timings.items()},
            "prompt_set": self.prompt_set,
            "prompt_set_checksum": self.prompt_set_checksum,
            "prompt_token_mismatches": self.prompt_token_mismatches,
            "main_trace": main.summary() if main else None,
        }


# ---------------------------------------------------------------------------------------------------------


async def _call_engine(engine: Engine, requests: list, timeout: float | None) -> list[Completion]:
    if timeout is None:
        return await engine.generate(requests)
    return await asyncio.wait_for(engine.generate(requests), timeout)


def _engine_failure(err: BaseException) -> tuple[str, str]:
    if isinstance(err, TimeoutError | asyncio.TimeoutError):
        return "engine_timeout", "the engine did not answer in time"
    if isinstance(err, EngineRefused):
        return "engine_refused", str(err)
    return "engine_error", f"{type(err).__name__}: {err}"


def _truncate_report(
    encoder: SegmentEncoder, body_ids: list[int], limit: int, mark: str
) -> tuple[str, int, bool]:
    """(report text, its token count, truncated?). Special tokens are dropped so a sub-agent cannot write
    chat markers into the main agent's context."""
    truncated = len(body_ids) > limit
    kept = body_ids[:limit]
    text = encoder.tokenizer.decode(kept, skip_special_tokens=True).strip()
    if truncated:
        text += mark
    return text, len(kept), truncated


class _Episode:
    """State of one running episode (the public entry point is ``arun_episode``)."""

    def __init__(
        self,
        row: EpisodeRow,
        engine: Engine,
        cfg: AgentConfig,
        encoder: SegmentEncoder,
        prompt_set: prompts.PromptSet,
    ):
        self.row, self.engine, self.cfg, self.encoder, self.ps = row, engine, cfg, encoder, prompt_set
        self.result = EpisodeResult(
            row_id=row.row_id,
            video=row.video,
            question=row.question,
            prompt_set=cfg.prompt_set,
            prompt_set_checksum=prompt_set.checksum,
        )
        self.conv = Conversation(
            encoder, role="main", trained=True, think_prefix=cfg.think_prefix, prompt_set=prompt_set
        )
        self.result.conversation = self.conv
        # tokens the server counts in the prompt beyond our exact count (chat engines rendering the
        # template themselves): the context budget uses the larger of the two
        self.server_extra_tokens = 0

    def _seed(self, offset: int) -> int | None:
        return None if self.cfg.seed is None else self.cfg.seed + offset

    async def run(self, overview: video_api.Frames | None) -> EpisodeResult:
        started = time.perf_counter()
        try:
            await self._run(overview)
        except Exception as err:  # a bug or an unforeseen input ends this episode only, never its group
            log.exception("episode %s ended by an internal error", self.row.row_id)
            self.result.finish_reason = "internal_error"
            self.result.error = f"{type(err).__name__}: {err}"
        finally:
            self.result.timings["total_s"] = time.perf_counter() - started
        return self.result

    async def _overview_parts(self, overview: video_api.Frames | None) -> list[Part] | None:
        """The overview's message parts (None: the video failed, said in the result). ``video_url``: the whole
        video as one ``file://`` part the server decodes (the release's Charades input): no frames here."""
        cfg, res = self.cfg, self.result
        if cfg.overview_channel == "video_url":
            try:
                path = await asyncio.to_thread(video_api.resolve, self.row.video)  # s3: fetched once
                if not os.path.isfile(path):
                    raise VideoNotFoundError(f"video not found: {self.row.video}")
            except Exception as err:
                res.finish_reason, res.error = "video_error", f"{type(err).__name__}: {err}"
                return None
            return [video_url_part(path)]
        k = self.row.nframes or cfg.overview_frames
        if overview is None:
            try:
                overview = await asyncio.to_thread(cfg.frames.overview, self.row.video, k, cfg)
            except Exception as err:  # VideoError for bad files; anything else must not kill a batch either
                res.finish_reason, res.error = "video_error", f"{type(err).__name__}: {err}"
                return None
        res.nframes = len(overview)
        res.overview_timestamps = list(overview.timestamps)
        res.overview_size = (int(overview.frames.shape[2]), int(overview.frames.shape[3]))
        parts: list[Part] = []
        for label, frame in zip(overview.labels(), overview.frames, strict=True):
            # unlabelled: the released driver's MCQ overview (frames only, no timestamps)
            parts += [text_part(label), image_part(frame)] if cfg.overview_labels else [image_part(frame)]
        return parts

    async def _run(self, overview: video_api.Frames | None) -> None:
        cfg, res = self.cfg, self.result
        t0 = time.perf_counter()
        parts = await self._overview_parts(overview)
        if parts is None:
            return
        res.timings["overview_s"] = time.perf_counter() - t0

        question = self.row.question
        if cfg.question_suffix and cfg.prompt_mode in prompts.TOOL_MODES:
            question = self.ps.question_with_suffix(question, os.path.basename(self.row.video))
        parts.append(text_part(question))
        t0 = time.perf_counter()
        self.conv.start(self.ps.system_prompt(cfg.prompt_mode), parts)
        res.timings["encode_s"] = time.perf_counter() - t0

        # Turn t follows t tool rounds (the loop ends at the first turn that does not continue).
        for turn in range(cfg.max_turns + 1):
            last = turn == cfg.max_turns
            forced = cfg.forced_answer is not None and last and turn > 0
            budget = self.ps.forced_answer[cfg.forced_answer].max_tokens if forced else cfg.max_new_tokens
            room = cfg.max_context_tokens - len(self.conv.trace) - self.server_extra_tokens
            if room < 1:
                res.finish_reason = "context_overflow"
                return
            sampling = SamplingParams(
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                max_new_tokens=min(budget, room),
                seed=self._seed(turn),
            )
            t0 = time.perf_counter()
            request = self.conv.request(sampling, tag="main")
            try:
                (completion,) = await _call_engine(self.engine, [request], cfg.engine_timeout_s)
            except Exception as err:  # any backend failure ends the episode with a reason
                res.finish_reason, res.error = _engine_failure(err)
                return
            gen_s = time.perf_counter() - t0
            if completion.prompt_tokens and completion.prompt_tokens != len(request.input_ids):
                # media the server decodes itself (a video_url) are its tokens, not a mismatch: only counted
                res.prompt_token_mismatches += not request.server_media
                self.server_extra_tokens = max(0, completion.prompt_tokens - len(request.input_ids))
            body = self.conv.add_generation(completion, turn=turn)
            record = TurnRecord(
                turn, self.conv.prefix + body, len(completion.token_ids), completion.finish_reason, gen_s
            )
            res.turns.append(record)
            res.final_text = record.text
            answer = extract_answer(record.text)
            if answer is not None:
                res.answer = answer

            if completion.finish_reason == "abort":
                res.finish_reason, res.error = "engine_error", "the server aborted the generation"
                return
            if not body.strip():
                res.finish_reason = "empty_generation"
                return
            calls = self._parse(record.text)  # with the forced prefix: think blocks are whole
            if completion.finish_reason == "length" and not self._runs_cut_calls(calls):
                record.calls = [self._rejected(turn, c, "generation cut by the token limit") for c in calls]
                res.finish_reason = "max_tokens_in_tag" if open_tag_at_end(record.text) else "max_tokens"
                return
            if not any(not c.skipped for c in calls):  # blocks the reader ignores do not continue a turn
                record.calls = [self._rejected(turn, c, c.error or "not a call") for c in calls]
                res.finish_reason = "answer" if answer is not None else "no_answer"
                return
            if last:
                record.calls = [self._rejected(turn, c, "no tool rounds left") for c in calls]
                res.finish_reason = "tool_call_in_last_turn"
                return

            t0 = time.perf_counter()
            record.calls, responses = await self._run_calls(turn, calls)
            record.tools_s = time.perf_counter() - t0
            forced_text = None
            if cfg.forced_answer is not None and turn + 1 == cfg.max_turns:
                forced_text = self.ps.forced_answer[cfg.forced_answer].text
            if cfg.tool_mode == "crop_frames":
                self.conv.add_user_messages(responses, turn=turn + 1, forced_answer=forced_text)
            else:
                self.conv.add_tool_turn(responses, turn=turn + 1, forced_answer=forced_text)

    def _parse(self, text: str) -> list[ParsedCall]:
        if self._rules().reader == "release":
            return parse_tool_calls_as_released(text)
        return parse_tool_calls(text)

    def _runs_cut_calls(self, calls: list[ParsedCall]) -> bool:
        """Whether a reply cut by the token limit still runs its calls: only under the release reader. The
        released driver never reads a finish reason (paravt/eval/driver.py at cf55249: no ``finish_reason`` in
        the file): eval_one runs the calls parse_tool_calls finds (line 481; its regex, line 217, needs the
        closing ``</tool_call>``, so a block the cut left open is no call), appends the cut text as it is as the
        assistant message (line 488) and counts the round like any other (``turn``, line 520). Without a
        complete call the cut reply is the final one (lines 482-484), as ours. Our own rule ends the episode
        (``max_tokens``)."""
        return self._rules().reader == "release" and any(not c.skipped for c in calls)

    def _rules(self) -> prompts.CropFramesRules:
        """The prompt set's crop_frames rules under tool_mode=crop_frames; the defaults (paravt-v1's) otherwise,
        so the sub-agent mode answers calls the same way whatever set it is given."""
        return self.ps.rules if self.cfg.tool_mode == "crop_frames" else prompts.CropFramesRules()

    @staticmethod
    def _rejected(turn: int, call: ParsedCall, why: str) -> CallRecord:
        return CallRecord(
            turn,
            call.index,
            call.form,
            call.raw,
            call.name,
            call.arguments,
            parsed=call.ok,
            error=why,
            dropped=call.skipped,
        )

    async def _run_calls(
        self, turn: int, calls: list[ParsedCall]
    ) -> tuple[list[CallRecord], list[list[Part]]]:
        cfg, rules = self.cfg, self._rules()
        records: list[CallRecord] = []
        responses: list[list[Part] | None] = []
        runnable: list[int] = []
        read = 0  # calls the reader returned (the released driver caps these, readable or not)
        for call in calls:
            rec = CallRecord(turn, call.index, call.form, call.raw, call.name, call.arguments, parsed=call.ok)
            records.append(rec)
            read += not call.skipped
            if call.skipped:  # not a call for the released driver's reader: no response at all
                rec.error, rec.dropped = call.error, True
            elif rules.reader == "release" and read > cfg.max_parallel:  # its tcs[:max_parallel]
                rec.error = self.ps.errors.too_many_calls.format(limit=cfg.max_parallel)
                rec.dropped = rules.extra_calls == "drop"
            elif not call.ok:
                rec.error = call.error
            elif call.name != prompts.TOOL_NAME and rules.tool_names == "checked":
                rec.error = self.ps.errors.unknown_tool.format(name=call.name)
            elif len(runnable) >= cfg.max_parallel:  # the cap counts calls that would run
                rec.error = self.ps.errors.too_many_calls.format(limit=cfg.max_parallel)
                rec.dropped = rules.extra_calls == "drop"
            else:
                runnable.append(len(records) - 1)
            responses.append(None)

        if cfg.dispatch == "batched":
            await self._serve(turn, runnable, records, responses)
        else:  # reference: one call at a time
            for i in runnable:
                await self._serve(turn, [i], records, responses)

        out: list[list[Part]] = []
        for rec, parts in zip(records, responses, strict=True):
            if rec.dropped:  # as the released driver: no message for it
                continue
            if parts is None:
                error = self.ps.error_text(rec.error or "the call failed")
                # crop_frames: each response is a whole user message, its text already a block
                parts = [
                    text_part(self.ps.tool_response_block(error) if cfg.tool_mode == "crop_frames" else error)
                ]
            out.append(parts)
        return records, out

    async def _serve(
        self, turn: int, indices: list[int], records: list[CallRecord], responses: list[list[Part] | None]
    ) -> None:
        """Crop every window of ``indices`` in one ``run_crops`` (shared frames decoded once, concurrently),
        then answer the served ones: the frames themselves, or sub-agents in one batched engine call."""
        cfg, rules = self.cfg, self._rules()
        windows: list[tuple[object, object]] = []
        requested: list[tuple[float, float]] = []  # the times asked for, as the released driver reads them
        for i in indices:
            args = records[i].arguments or {}
            requested.append(lenient_window(args))
            if rules.times == "lenient":
                windows.append(requested[-1])
            else:
                windows.append(
                    (args.get("start_time", args.get("start")), args.get("end_time", args.get("end")))
                )
        if not windows:
            return
        t0 = time.perf_counter()
        crops = await asyncio.to_thread(cfg.frames.crops, self.row.video, windows, cfg)
        crop_s = time.perf_counter() - t0
        served: list[tuple[int, video_api.Frames]] = []
        asked: dict[int, tuple[float, float]] = {}
        for i, crop, window in zip(indices, crops, requested, strict=True):
            rec = records[i]
            rec.executed, rec.crop_s = True, crop_s
            asked[i] = window
            if isinstance(crop, CropError):
                rec.error = str(crop)  # the real reason, whatever the model is shown
                if rules.crop_failed is not None:  # set only under crop_frames (see _rules)
                    text = rules.crop_failed.format(start=window[0], end=window[1])
                    responses[i] = [text_part(self.ps.tool_response_block(text))]
            else:
                rec.window, rec.frames = crop.window, len(crop)
                served.append((i, crop))

        if cfg.tool_mode == "crop_frames":  # the released driver's layout: unlabelled frames, then the note
            for i, crop in served:
                start, end = crop.window or (0.0, 0.0)
                if rules.note_times == "requested":
                    start, end = asked[i]
                note = self.ps.tool_response_block(self.ps.crop_frames_text(len(crop), start, end))
                responses[i] = [*(image_part(frame) for frame in crop.frames), text_part(note)]
                records[i].ok = True
        elif served:
            await self._run_subagents(turn, served, records, responses)

    async def _run_subagents(
        self,
        turn: int,
        served: list[tuple[int, video_api.Frames]],
        records: list[CallRecord],
        responses: list[list[Part] | None],
    ) -> None:
        cfg, sub = self.cfg, self.cfg.subagent
        question = self.row.question if sub.see_question else None
        convs: list[Conversation] = []
        requests = []
        for k, (i, crop) in enumerate(served):
            conv = Conversation(self.encoder, role="subagent", trained=sub.train, prompt_set=self.ps)
            start, end = crop.window or (0.0, 0.0)
            parts = [image_part(frame) for frame in crop.frames]
            parts.append(text_part(self.ps.subagent_prompt(start, end, question)))
            conv.start(None, parts)
            sampling = SamplingParams(
                temperature=cfg.subagent_temperature,
                top_p=sub.top_p,
                max_new_tokens=sub.max_new_tokens,
                # distinct per sub-agent of the turn: identical seeds would sample identical reports for
                # identical windows; offset 1000 per turn keeps them apart from the main agent's seeds
                seed=self._seed(1000 * (turn + 1) + k),
            )
            convs.append(conv)
            requests.append(conv.request(sampling, tag="subagent"))
            records[i].subagent = conv.trace

        # One batched engine call for every sub-agent of the turn.
        t0 = time.perf_counter()
        try:
            completions = await _call_engine(self.engine, requests, cfg.engine_timeout_s)
        except Exception as err:
            _, why = _engine_failure(err)
            for i, _ in served:
                records[i].error = self.ps.errors.subagent_failed.format(reason=why)
                records[i].subagent_s = time.perf_counter() - t0
                records[i].subagent = None  # no generation to train on
            return
        sub_s = time.perf_counter() - t0
        for (i, _), conv, completion in zip(served, convs, completions, strict=True):
            rec = records[i]
            conv.add_generation(completion, turn=0)
            ids = list(completion.token_ids)
            if ids and ids[-1] == self.encoder.eos_token_id:
                ids = ids[:-1]
            if not completion.exact_tokens:
                ids = self.encoder.count(completion.text.removesuffix("<|im_end|>"))
            report, n_tokens, truncated = _truncate_report(
                self.encoder, ids, sub.max_report_tokens, self.ps.subagent.truncation_mark
            )
            rec.report = report or self.ps.subagent.empty_report
            rec.report_tokens, rec.truncated = n_tokens, truncated
            rec.subagent_s = sub_s
            rec.ok = True
            responses[i] = [text_part(rec.report)]


def make_encoder(engine: Engine, cfg: AgentConfig, processor: Any = None) -> SegmentEncoder:
    processor = processor if processor is not None else engine.processor
    if processor is None:
        raise ValueError(f"engine {engine.name!r} has no processor; pass processor= to run an episode")
    pixels = cfg.frames.processor_pixels(cfg)  # None: the checkpoint's own processor settings
    lo, hi = pixels if pixels is not None else (None, None)
    return SegmentEncoder(processor, max_pixels=hi, min_pixels=lo)


async def arun_episode(
    row: EpisodeRow | Mapping[str, Any],
    engine: Engine,
    cfg: AgentConfig | None = None,
    *,
    processor: Any = None,
    overview: video_api.Frames | None = None,
) -> EpisodeResult:
    """Run one episode. ``overview`` lets a group of rollouts share one decoded overview; ``processor``
    is needed when the engine does not carry one (e.g. an OpenAI-compatible server)."""
    cfg = cfg or AgentConfig()
    episode_row = EpisodeRow.coerce(row)
    encoder = make_encoder(engine, cfg, processor)
    prompt_set = cfg.bind_prompt_set()  # records the set's checksum in cfg (a pinned one is checked)
    return await _Episode(episode_row, engine, cfg, encoder, prompt_set).run(overview)


def run_episode(
    row: EpisodeRow | Mapping[str, Any],
    engine: Engine,
    cfg: AgentConfig | None = None,
    **kwargs: Any,
) -> EpisodeResult:
    """Synchronous wrapper of ``arun_episode`` (for scripts; inside an event loop await the async one)."""
    return asyncio.run(arun_episode(row, engine, cfg, **kwargs))


async def arun_episodes(
    rows: Sequence[EpisodeRow | Mapping[str, Any]],
    engine: Engine,
    cfg: AgentConfig | None = None,
    **kwargs: Any,
) -> list[EpisodeResult]:
    """Several episodes concurrently on one engine (their tool phases overlap the others' generations)."""
    return list(await asyncio.gather(*(arun_episode(r, engine, cfg, **kwargs) for r in rows)))
