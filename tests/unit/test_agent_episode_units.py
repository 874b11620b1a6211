"""The episode's records and its smaller rules, each value worked out by hand: a dataset row read from any of
its keys, the records' JSON form (rounded to 4 places, the call counts), engine failures and their reasons.
In-process; the episodes here run on the tiny model's processor with scripted replies (milliseconds each)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from paravt_core.agent import frame_paths
from paravt_core.agent.episode import CallRecord, EpisodeResult, EpisodeRow, TurnRecord, arun_episode
from paravt_core.agent.frame_paths.decoder import DecoderPath
from paravt_core.agent.parsing import format_tool_call
from paravt_core.engines.scripted import ScriptedEngine
from tests.support.agent_support import tiny_agent_config


def crop(start, end) -> str:
    return format_tool_call("crop_video", {"start_time": start, "end_time": end})


def run(engine, video_path, **cfg) -> EpisodeResult:
    row = {"video": str(video_path), "question": "Which shape? A. square B. circle", "id": "r"}
    return asyncio.run(arun_episode(row, engine, tiny_agent_config(**cfg)))


def test_a_row_is_read_from_any_of_its_video_keys_and_its_id_from_row_id_or_id():
    row = EpisodeRow.coerce({"video_path": "/v/a.mp4", "question": 7, "id": 12, "nframes": 16})
    assert (row.video, row.question, row.row_id, row.question_type, row.nframes) == (
        "/v/a.mp4",
        "7",
        "12",
        None,
        16,
    )
    row = EpisodeRow.coerce({"video_uri": "s3://b/v.mp4", "question": "Q", "row_id": "x", "id": "y",
                             "question_type": "mcq"})  # fmt: skip
    assert (row.video, row.row_id, row.question_type, row.nframes) == ("s3://b/v.mp4", "x", "mcq", None)
    row = EpisodeRow.coerce(
        {"video": "", "video_path": "p.mp4", "question": "Q"}
    )  # an empty key: the next one
    assert (row.video, row.row_id) == ("p.mp4", "")
    same = EpisodeRow("v.mp4", "Q")
    assert EpisodeRow.coerce(same) is same
    with pytest.raises(ValueError) as err:
        EpisodeRow.coerce({"video": "v.mp4", "answer": "B"})
    assert str(err.value) == "row needs 'video' and 'question' keys, got ['answer', 'video']"
    with pytest.raises(ValueError, match=r"^row needs 'video' and 'question' keys, got \['question'\]$"):
        EpisodeRow.coerce({"question": "Q"})


def test_the_records_json_rounds_to_four_places_and_counts_the_calls():
    served = CallRecord(1, 0, "json", "<tool_call>...", "crop_video", {"start_time": 0, "end_time": 2},
                        parsed=True, executed=True, ok=True, window=(0.0, 2.0), frames=4, crop_s=0.123456,
                        subagent_s=0.5, report="Saw it", report_tokens=3, truncated=True)  # fmt: skip
    failed = CallRecord(1, 1, "json", "raw", "crop_video", {}, parsed=True, executed=True, error="bad window")
    rejected = CallRecord(1, 2, "json", "raw", error="not valid JSON", dropped=True)
    assert served.to_dict() == {
        "turn": 1, "index": 0, "form": "json", "name": "crop_video", "arguments": {"start_time": 0, "end_time": 2},
        "parsed": True, "executed": True, "ok": True, "error": None, "dropped": False, "frames": 4,
        "window": [0.0, 2.0], "crop_s": 0.1235, "subagent_s": 0.5, "latency_s": 0.6235, "report": "Saw it",
        "report_tokens": 3, "truncated": True,
    }  # fmt: skip
    assert rejected.to_dict()["window"] is None and rejected.to_dict()["dropped"] is True
    assert "raw" not in rejected.to_dict()  # the block itself is in the turn's text
    turn = TurnRecord(
        1, "<think>t</think>", 9, "stop", 1.234567, tools_s=0.000049, calls=[served, failed, rejected]
    )
    assert {k: v for k, v in turn.to_dict().items() if k != "calls"} == {
        "turn": 1, "text": "<think>t</think>", "tokens": 9, "finish_reason": "stop", "generation_s": 1.2346,
        "tools_s": 0.0,
    }  # fmt: skip
    assert turn.to_dict()["calls"] == [served.to_dict(), failed.to_dict(), rejected.to_dict()]
    first = TurnRecord(0, "a", 1, "stop", 0.5, calls=[rejected])
    result = EpisodeResult("r", "v.mp4", "Q", "answer", answer="B", final_text="<answer>B</answer>", nframes=8,
                           overview_timestamps=[0.0, 1.5], overview_size=(64, 96), turns=[first, turn, TurnRecord(
                               2, "<answer>B</answer>", 4, "stop", 0.1)], timings={"total_s": 2.000049},
                           prompt_set="paravt-v1", prompt_set_checksum="abc", prompt_token_mismatches=2)  # fmt: skip
    # one round ran a call (turn 1): turn 0's call was rejected, turn 2 had none
    assert result.tool_rounds == 1 and result.calls == [rejected, served, failed, rejected]
    assert result.counts() == {"calls_total": 4, "calls_parsed": 2, "calls_executed": 2, "calls_succeeded": 1,
                               "calls_failed": 1, "calls_rejected": 2}  # fmt: skip
    assert result.assistant_text() == "a\n<think>t</think>\n<answer>B</answer>"
    assert result.to_dict() == {
        "row_id": "r", "video": "v.mp4", "question": "Q", "finish_reason": "answer", "error": None, "answer": "B",
        "final_text": "<answer>B</answer>", "nframes": 8, "overview_timestamps": [0.0, 1.5],
        "overview_size": [64, 96], "tool_rounds": 1, **result.counts(),
        "turns": [t.to_dict() for t in result.turns], "timings": {"total_s": 2.0}, "prompt_set": "paravt-v1",
        "prompt_set_checksum": "abc", "prompt_token_mismatches": 2, "main_trace": None,
    }  # fmt: skip
    assert EpisodeResult("r", "v", "q").to_dict()["overview_size"] is None
    assert result.subagent_traces == [] and result.main is None


class _ChatSubagents(ScriptedEngine):
    """Sub-agent replies as a chat engine returns them: the server's text, its token ids a re-tokenization
    that may not match (here none at all), ``exact_tokens`` False."""

    def complete(self, request, item):
        done = super().complete(request, item)
        if request.tag != "subagent":
            return done
        return dataclasses.replace(done, token_ids=[], logprobs=None, exact_tokens=False)


class _OneReportShort(ScriptedEngine):
    """Answers a batch of sub-agents with one completion too few."""

    async def generate(self, requests):
        out = await super().generate(requests)
        return out[:-1] if requests[0].tag == "subagent" else out


def test_a_call_keeps_its_block_text_whether_it_ran_or_was_rejected(tiny_model, video):
    body = '\n{"name": "crop_video", "arguments": {"start_time": 0, "end_time": 2}}\n'  # between the tags
    result = run(ScriptedEngine(tiny_model.processor, [crop(0, 2), "<answer>B</answer>"]), video)
    (call,) = result.calls
    assert (call.ok, call.raw) == (True, body)
    # max_turns=0: the first turn is the last, its call is rejected ("no tool rounds left")
    result = run(ScriptedEngine(tiny_model.processor, [crop(0, 2)]), video, max_turns=0)
    (call,) = result.calls
    assert (result.finish_reason, call.error, call.executed) == (
        "tool_call_in_last_turn",
        "no tool rounds left",
        False,
    )
    assert call.raw == body


def test_a_chat_engines_subagent_report_is_read_from_its_text(tiny_model, video):
    engine = _ChatSubagents(
        tiny_model.processor, [crop(0, 2), "<answer>B</answer>"], subagent="Saw a circle."
    )
    result = run(engine, video)
    (call,) = result.calls
    # the text without its end-of-turn marker, counted by the tokenizer (not the missing ids: an empty report)
    expected = tiny_model.processor.tokenizer("Saw a circle.", add_special_tokens=False)["input_ids"]
    assert (call.ok, call.report, call.report_tokens, call.truncated) == (
        True,
        "Saw a circle.",
        len(expected),
        False,
    )


def test_an_engine_answering_fewer_subagents_than_asked_ends_the_episode(tiny_model, video):
    engine = _OneReportShort(tiny_model.processor, [crop(0, 2) + crop(3, 5), "<answer>B</answer>"])
    result = run(engine, video)
    assert result.finish_reason == "internal_error"
    assert result.error == "ValueError: zip() argument 3 is shorter than arguments 1-2"


class _OneCropShort(DecoderPath):
    """The decoder path, answering a turn's windows with one crop too few."""

    def crops(self, video, windows, agent):
        return super().crops(video, windows, agent)[:-1]


def test_a_frame_path_answering_fewer_crops_than_windows_ends_the_episode(tiny_model, video, monkeypatch):
    monkeypatch.setitem(frame_paths.FRAME_PATHS, "decoder", _OneCropShort())
    result = run(ScriptedEngine(tiny_model.processor, [crop(0, 2) + crop(3, 5), "<answer>B</answer>"]), video)
    assert result.finish_reason == "internal_error"
    assert result.error == "ValueError: zip() argument 2 is shorter than argument 1"


class _ServerCounts(ScriptedEngine):
    """Reports 5 prompt tokens more than it was sent, as a chat server whose template adds some."""

    def complete(self, request, item):
        done = super().complete(request, item)
        return dataclasses.replace(done, prompt_tokens=len(request.input_ids) + 5)


def test_turns_are_numbered_and_the_traces_named_by_role(tiny_model, video):
    result = run(ScriptedEngine(tiny_model.processor, [crop(0, 2), "<answer>B</answer>"]), video)
    assert [t.turn for t in result.turns] == [0, 1] and result.prompt_token_mismatches == 0
    assert result.main.role == "main" and result.to_dict()["main_trace"]["role"] == "main"
    assert [t.role for t in result.subagent_traces] == ["subagent"]


def test_a_server_counting_more_prompt_tokens_is_recorded_and_shrinks_the_room(tiny_model, video):
    script = [crop(0, 2), "<answer>B</answer>"]
    probe = ScriptedEngine(tiny_model.processor, list(script))
    run(probe, video)
    second = len(probe.requests[-1].input_ids)  # the second main-agent prompt (a sub-agent's came before it)
    engine = _ServerCounts(tiny_model.processor, list(script))
    result = run(engine, video, max_context_tokens=second + 100)
    assert result.finish_reason == "answer" and result.prompt_token_mismatches == 2  # both main turns
    # the room of the second turn: the context less its prompt and the 5 tokens the server adds
    assert engine.requests[-1].sampling.max_new_tokens == 100 - 5
    # the first turn's room: the context less its prompt only (the server had not answered yet)
    assert engine.requests[0].sampling.max_new_tokens == second + 100 - len(engine.requests[0].input_ids)


def test_a_video_url_overview_is_the_whole_file_and_a_missing_one_is_a_video_error(
    tiny_model, video, tmp_path
):
    engine = ScriptedEngine(tiny_model.processor, ["<answer>B</answer>"])
    result = run(engine, video, overview_channel="video_url")
    assert result.finish_reason == "answer" and result.nframes == 0 and result.overview_timestamps == []
    first = result.conversation.messages[1]["content"][0]
    assert first == {"type": "video_url", "video_url": {"url": f"file://{video}"}}
    result = run(
        ScriptedEngine(tiny_model.processor, []), tmp_path / "missing.mp4", overview_channel="video_url"
    )
    assert (result.finish_reason, result.error) == (
        "video_error", f"VideoNotFoundError: video not found: {tmp_path / 'missing.mp4'}")  # fmt: skip


def test_an_overview_whose_labels_and_frames_differ_in_number_is_refused(tiny_model, video):
    from paravt_core.video import api

    shared = api.overview(video, 4, max_pixels=64 * 96, min_pixels=32 * 32)
    short = api.Frames(shared.frames, shared.timestamps[:3], shared.indices)  # 4 frames, 3 times
    row = {"video": str(video), "question": "Q", "id": "r"}
    engine = ScriptedEngine(tiny_model.processor, ["<answer>B</answer>"])
    result = asyncio.run(arun_episode(row, engine, tiny_agent_config(), overview=short))
    assert (result.finish_reason, result.error) == (
        "internal_error", "ValueError: zip() argument 2 is longer than argument 1")  # fmt: skip


def test_crop_frames_mode_asks_for_the_forced_answer_after_the_last_round(tiny_model, video):
    engine = ScriptedEngine(tiny_model.processor, [crop(0, 2), "B"])
    result = run(engine, video, tool_mode="crop_frames", max_turns=1, forced_answer="mcq")
    forced = (
        "Based on the video and cropped segments above, answer with ONLY the letter."  # docs/method.md §4.2
    )
    messages = result.conversation.messages
    assert messages[-2]["role"] == "user" and messages[-2]["content"] == forced
    assert engine.requests[-1].sampling.max_new_tokens == 64
