"""``paravt agent run`` on the tiny model and a synthetic video, through the real ``paravt`` entry point."""

from __future__ import annotations

import json

from paravt_core.agent.parsing import format_tool_call
from paravt_core.agent.prompts import load_prompt_set
from paravt_core.cli import main as paravt
from paravt_core.engines.transformers_engine import TransformersEngine
from tests.support.agent_cli_support import FAST
from tests.support.agent_support import MAX_PIXELS
from tests.support.openai_test_server import TinyChatServer


def test_agent_run_prints_the_trajectory(tiny_model_dir, video, tmp_path, capsys):
    replies = [
        "Two places to check.</think>\n"
        + format_tool_call("crop_video", {"start_time": 1, "end_time": 5})
        + "\n"
        + format_tool_call("crop_video", {"start_time": "00:06", "end_time": 30}),
        "The circle.</think><answer>B</answer>",
    ]
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(replies))
    out_json = tmp_path / "trajectory.json"
    args = [
        "agent",
        "run",
        "--model",
        tiny_model_dir,
        "--video",
        str(video),
        "--question",
        "Which shape first?",
    ]
    code = paravt(
        args
        + FAST
        + ["--think-prefix", "--max-new-tokens", "200", "--script", str(script), "--json", str(out_json)]
    )
    printed = capsys.readouterr().out
    assert code == 0
    # 12 s at 4 fps: targets k * 11.75 / 7 = 0, 1.68, 3.36, 5.04, 6.71, 8.39, 10.07, 11.75 s, shown frames on
    # the 0.25 s grid at or before them: 0, 1.5, 3.25, 5, 6.5, 8.25, 10, 11.75 (printed with one decimal,
    # half to even: 3.2, 8.2, 11.8), at 64x64
    assert "overview: 8 frames of 64x64 px at [0.0, 1.5, 3.2, 5.0, 6.5, 8.2, 10.0, 11.8] s" in printed
    assert "question: Which shape first?" in printed
    flat = " ".join(printed.replace("│", " ").split())  # rich wraps long lines and draws panel borders
    assert f"prompt set: paravt-v1 ({load_prompt_set('paravt-v1').checksum})" in flat
    assert (
        "<think> Two places to check.</think>" in flat
        and "<think> The circle.</think><answer>B</answer>" in flat
    )
    assert "turn 0 · " in printed and "turn 1 · " in printed and "turn 2" not in printed
    assert "tool calls of turn 0" in printed
    assert "1.0–5.0 s" in printed and "6.0–12.0 s" in printed  # the second window clamped to the video
    assert "answer: 'B'    finish: answer" in printed
    assert "tool rounds 1/3 · calls 2 (executed 2, ok 2, failed 0, rejected 0)" in printed
    data = json.loads(out_json.read_text())
    assert data["finish_reason"] == "answer" and data["calls_executed"] == 2 and data["calls_succeeded"] == 2
    assert [c["window"] for c in data["turns"][0]["calls"]] == [[1.0, 5.0], [6.0, 12.0]]
    # 1 fps: 4 s -> 4 frames; 6 s -> 6, capped at crop.max_frames=4
    assert [c["frames"] for c in data["turns"][0]["calls"]] == [4, 4]
    assert all(c["report"] for c in data["turns"][0]["calls"])  # real tiny-model sub-agent reports


def test_agent_run_real_model_and_errors(tiny_model_dir, video, tmp_path, capsys):
    base = ["agent", "run", "--model", tiny_model_dir, "--question", "What is shown?"]
    out_json = tmp_path / "real.json"
    assert paravt(base + ["--video", str(video), "--json", str(out_json)] + FAST) == 0
    printed = capsys.readouterr().out
    data = json.loads(out_json.read_text())
    # the random model writes neither a call nor an answer in 12 tokens: one turn, no answer
    assert len(data["turns"]) == 1 and data["answer"] is None and data["calls_total"] == 0
    assert data["finish_reason"] in ("max_tokens", "no_answer", "max_tokens_in_tag")
    assert f"answer: None    finish: {data['finish_reason']}" in printed
    assert f"turn 0 · {data['turns'][0]['tokens']} tokens · " in printed

    # a missing local video: named before the model loads, not an episode ending in video_error
    assert paravt(base + ["--video", str(tmp_path / "missing.mp4")] + FAST) == 2
    assert capsys.readouterr().err.endswith(f"--video {tmp_path / 'missing.mp4'}: no such file\n")

    assert paravt(base + ["--video", str(video), "max_turnz=2"]) == 2  # the stages' key=value grammar
    err = capsys.readouterr().err
    assert "unknown config key 'max_turnz'" in err and err.count("\n") == 1


def test_agent_run_against_an_openai_compatible_server(tiny_model, tiny_model_dir, video, capsys):
    engine = TransformersEngine(tiny_model.model, tiny_model.processor)
    with TinyChatServer(engine) as server:
        args = ["agent", "run", "--engine", "openai", "--base-url", server.base_url, "--served-model", "tiny"]
        args += ["--model", tiny_model_dir, "--video", str(video), "--question", "What is shown?"]
        assert paravt(args + FAST) == 0
        sent = list(server.bodies)
    printed = capsys.readouterr().out
    # one generation (the random model calls no tool): one request, greedy, the sub-agents' temperature too
    assert len(sent) == 1 and sent[0]["temperature"] == 0.0 and sent[0]["max_tokens"] == 12
    assert sent[0]["mm_processor_kwargs"] == {"size": {"shortest_edge": 784, "longest_edge": MAX_PIXELS}}
    assert "turn 0 · " in printed and "turn 1" not in printed and "answer: None" in printed


def test_agent_run_help_shows_the_examples_scripted_replies_included(capsys):
    """`paravt agent run --help` carries the module's examples: how to watch parallel crop_video calls."""
    import pytest

    with pytest.raises(SystemExit) as done:
        paravt(["agent", "run", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "one episode on one video, the whole trajectory printed" in out
    assert "--script replies.json" in out and "scripted replies" in out


def test_a_script_that_is_not_json_is_one_line_and_status_2(tmp_path, capsys):
    script = tmp_path / "replies.txt"
    script.write_text("crop the first minute")
    argv = ["agent", "run", "--model", str(tmp_path / "none"), "--video", "v.mp4", "--question", "q"]
    assert paravt([*argv, "--script", str(script)]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == f"paravt agent: error: --script {script}: not JSON (Expecting value: line 1 column 1 (char 0))\n"
    )


def test_a_missing_video_or_a_stage_folder_as_model_is_named_before_loading(tmp_path, capsys):
    """Checked before the model loads (seconds on CPU): a missing --video, and --model at a stage's output
    instead of its final/ checkpoint."""
    stage = tmp_path / "sft"
    (stage / "final").mkdir(parents=True)
    (stage / "final" / "config.json").write_text("{}")
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"")
    argv = ["agent", "run", "--question", "q", "--model", str(stage)]
    assert paravt([*argv, "--video", str(tmp_path / "nope.mp4")]) == 2
    assert capsys.readouterr().err == f"paravt agent: error: --video {tmp_path / 'nope.mp4'}: no such file\n"
    assert paravt([*argv, "--video", str(clip)]) == 2
    assert capsys.readouterr().err == (
        f"paravt agent: error: --model {stage} is a stage output, not a model (no config.json); "
        f"did you mean {stage / 'final'}?\n"
    )
