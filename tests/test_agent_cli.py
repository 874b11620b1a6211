"""``paravt agent run`` on the tiny model and a synthetic video, through the real ``paravt`` entry point."""

from __future__ import annotations

import json

from paravt_core.agent.parsing import format_tool_call
from paravt_core.cli import main as paravt
from paravt_core.engines.transformers_engine import TransformersEngine
from tests.agent_support import MAX_PIXELS, video  # noqa: F401
from tests.openai_test_server import TinyChatServer

FAST = ["--overview-frames", "8", "--max-pixels", str(MAX_PIXELS), "--temperature", "0", "--max-new-tokens", "12",
        "--set", "subagent.max_new_tokens=8", "--set", "subagent.temperature=0", "--set", "crop.max_frames=4"]  # fmt: skip


def test_agent_run_prints_the_trajectory(tiny_model_dir, video, tmp_path, capsys):  # noqa: F811
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
    assert "overview: 8 frames of 64x64 px" in printed
    assert "turn 0" in printed and "turn 1" in printed
    assert "1.0–5.0 s" in printed and "6.0–12.0 s" in printed  # the second window clamped to the video
    assert "answer: 'B'" in printed and "finish: answer" in printed
    data = json.loads(out_json.read_text())
    assert data["finish_reason"] == "answer" and data["calls_executed"] == 2 and data["calls_succeeded"] == 2
    assert [c["window"] for c in data["turns"][0]["calls"]] == [[1.0, 5.0], [6.0, 12.0]]
    assert all(c["report"] for c in data["turns"][0]["calls"])  # real tiny-model sub-agent reports


def test_agent_run_real_model_and_errors(tiny_model_dir, video, tmp_path, capsys):  # noqa: F811
    base = ["agent", "run", "--model", tiny_model_dir, "--question", "What is shown?"]
    assert paravt(base + ["--video", str(video)] + FAST) == 0
    printed = capsys.readouterr().out
    assert "overview: 8 frames" in printed and "turn 0 · " in printed and "finish: " in printed

    assert paravt(base + ["--video", str(tmp_path / "missing.mp4")] + FAST) == 1
    assert "finish: video_error" in capsys.readouterr().out

    assert paravt(base + ["--video", str(video), "--set", "max_turnz=2"]) == 2
    assert "max_turnz" in capsys.readouterr().out


def test_agent_run_against_an_openai_compatible_server(tiny_model, tiny_model_dir, video, capsys):  # noqa: F811
    engine = TransformersEngine(tiny_model.model, tiny_model.processor)
    with TinyChatServer(engine) as server:
        args = ["agent", "run", "--engine", "openai", "--base-url", server.base_url, "--served-model", "tiny"]
        args += ["--model", tiny_model_dir, "--video", str(video), "--question", "What is shown?"]
        assert paravt(args + FAST) == 0
        assert server.attempts >= 1
    assert "finish: " in capsys.readouterr().out
