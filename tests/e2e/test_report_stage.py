"""``paravt report`` end to end on hand-made eval outputs: local paths and the real S3 server.

The previous nights' summaries and this night's eval outputs (``results.json`` + ``_COMPLETE``) are
written by hand; expected values and deltas are worked out in the comments.
"""

from __future__ import annotations

import json

import pytest

from paravt_core import storage
from paravt_core.cli import main
from paravt_core.config import ReportConfig
from paravt_core.report.stage import find_night, night_uri, run, start_night
from paravt_core.report.trend import FAILED, SUCCEEDED
from tests.support.report_support import NIGHT, _config, _eval_output, _seed


def _check(prefix: str, output: str, result) -> None:
    night = json.loads(storage.read_bytes(night_uri(prefix, NIGHT)))
    assert night["state"] == FAILED and night["error"] == "task eval-op failed"
    assert night["run_id"] == ""
    assert night["benchmarks"]["videomme"] == {
        "state": SUCCEEDED,
        "scores": {"agentic": 62.5, "direct": 58.0},
        "error": "",
    }
    assert night["benchmarks"]["charades"]["state"] == FAILED
    assert "no complete eval output" in night["benchmarks"]["charades"]["error"]

    # Latest night: videomme agentic 62.5, previous value 60.0 (11-22 failed, skipped): delta +2.5.
    assert result.metrics["trend.videomme.agentic"] == 62.5
    assert result.metrics["trend.videomme.agentic.delta"] == pytest.approx(2.5)
    assert "trend.videomme.direct.delta" not in result.metrics  # first value of that series
    assert result.metrics["trend.nights"] == 3.0 and result.metrics["trend.failed_nights"] == 2.0
    md = storage.read_bytes(storage.join(output, "report.md")).decode()
    # Columns sorted: videomme (agentic), videomme (direct); charades has no value on any night.
    assert "| 2026-11-23 | failed | 62.5 (+2.5) | 58.0 |" in md
    assert "| 2026-11-22 | failed | failed | failed |" in md
    assert "| 2026-11-21 | succeeded | 60.0 | — |" in md
    assert storage.read_bytes(storage.join(output, "trend.png"))[:8] == b"\x89PNG\r\n\x1a\n"
    page = storage.read_bytes(storage.join(output, "report.html")).decode()
    assert page.count("data:image/png;base64,") == 1 and "task eval-op failed" in page
    assert storage.is_complete(output)
    assert json.loads(storage.read_bytes(storage.join(output, "metrics.json"))) == pytest.approx(
        result.metrics
    )


def test_report_stage_local(tmp_path) -> None:
    prefix, output = str(tmp_path / "nightly"), str(tmp_path / "nightly" / NIGHT / "report")
    _seed(prefix)
    _check(prefix, output, run(_config(prefix, output, "FAILED")))


def test_report_stage_s3(s3_bucket: str) -> None:
    prefix = f"{s3_bucket}/nightly"
    output = f"{prefix}/{NIGHT}/report"
    _seed(prefix)
    _check(prefix, output, run(_config(prefix, output, "FAILED")))


def test_report_cli_eval_table(tmp_path, capsys) -> None:
    out_a, out_b = str(tmp_path / "eval-a"), str(tmp_path / "eval-b")
    _eval_output(out_a, "videomme", {"agentic": 61.0, "direct": 57.5})
    _eval_output(out_b, "charades", {"agentic": 49.0}, headline="miou")
    argv = ["report", f"output={tmp_path / 'rep'}", f"eval_outputs=[{out_a}, {out_b}]"]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["metrics"] == {"videomme.agentic": 61.0, "videomme.direct": 57.5, "charades.agentic": 49.0}
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| videomme | direct | 57.5 |" in md and "| charades | agentic | 49.0 |" in md
    assert not (tmp_path / "rep" / "trend.png").exists()  # no results prefix: no trend


def test_final_step_finds_the_night_its_run_started(tmp_path) -> None:
    """A run that crossed midnight: its report (no explicit night) finishes the night it started."""
    prefix = str(tmp_path / "nightly")
    start_night(prefix, "2026-11-20", "c0", run_id="other-run")
    assert start_night(prefix, "2026-11-22", "c1", run_id="run-77") == "2026-11-22"
    assert find_night(prefix, "run-77") == "2026-11-22"
    assert find_night(prefix, "unknown") is None and find_night(prefix, "") is None
    cfg = ReportConfig.model_validate(
        {
            "output": str(tmp_path / "rep"),
            "trend": {"results_prefix": prefix, "run_id": "run-77", "state": "SUCCEEDED"},
        }
    )
    run(cfg)
    night = json.loads(storage.read_bytes(night_uri(prefix, "2026-11-22")))
    # No benchmarks expected and KFP says succeeded: a succeeded night, same run id.
    assert night["state"] == SUCCEEDED and night["run_id"] == "run-77" and night["checkpoint"] == ""


def _png(color: str) -> bytes:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1, 1))
    ax.plot([0, 1], [1, 0], color=color)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def test_report_shows_training_metrics_and_plots(tmp_path) -> None:
    import base64

    sft, rl = str(tmp_path / "sft"), str(tmp_path / "rl")
    curve, reward, nested = _png("red"), _png("blue"), _png("green")
    storage.write_bytes(
        storage.join(sft, "metrics.json"), json.dumps({"steps": 10, "last_loss": 1.25, "ok": True}).encode()
    )
    storage.write_bytes(storage.join(sft, "loss_curve.png"), curve)
    storage.write_bytes(storage.join(sft, "checkpoints", "step-10", "x.png"), nested)  # not a top-level plot
    storage.write_bytes(
        storage.join(rl, "metrics.json"), json.dumps({"mean_reward": 0.5, "run": "r1"}).encode()
    )
    storage.write_bytes(storage.join(rl, "reward_curve.png"), reward)
    cfg = ReportConfig.model_validate({"output": str(tmp_path / "rep"), "sft_output": sft, "rl_output": rl})
    result = run(cfg)
    # Numbers only (booleans and strings are not metrics), prefixed by the stage.
    assert result.metrics == {"sft.steps": 10.0, "sft.last_loss": 1.25, "rl.mean_reward": 0.5}
    page = (tmp_path / "rep" / "report.html").read_text()
    for png in (curve, reward):
        assert base64.b64encode(png).decode() in page
    assert base64.b64encode(nested).decode() not in page
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## SFT" in md and "| last_loss | 1.25 |" in md and "| mean_reward | 0.5 |" in md


def test_a_data_folder_given_as_sft_output_is_shown_as_data(tmp_path) -> None:
    """The section's heading and metric prefix come from the stage that wrote the folder (its _COMPLETE
    says data), not from the field it was given in; an SFT folder keeps its SFT heading."""
    data, sft = str(tmp_path / "data"), str(tmp_path / "sft")
    storage.write_bytes(
        storage.join(data, "metrics.json"), json.dumps({"sft_rows": 7, "rl_rows": 3}).encode()
    )
    storage.mark_complete(data, {"stage": "data"})
    storage.write_bytes(storage.join(sft, "metrics.json"), json.dumps({"steps": 4}).encode())
    storage.mark_complete(sft, {"stage": "sft"})
    result = run(ReportConfig(output=str(tmp_path / "rep"), sft_output=data, rl_output=sft))
    assert result.metrics == {"data.sft_rows": 7.0, "data.rl_rows": 3.0, "sft.steps": 4.0}
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Data\n" in md and "## SFT\n" in md and "## RL" not in md


def test_every_training_number_of_the_report_is_explained_in_one_line() -> None:
    """The SFT and RL numbers the demo's report shows (their metrics.json keys) each carry a one-line
    meaning beside them, in the Markdown and the HTML."""
    from paravt_core.report import render
    from paravt_core.sft.metrics import summary

    records = [
        {"step": s, "loss": 5.0 - s, "tokens": 100, "step_time_s": 0.5, "padding_share": 0.25, "sequences": 2}
        for s in (1, 2, 3, 4)
    ]
    sft = {k: v for k, v in summary(records, 8, {"missing_media": 1}).items() if isinstance(v, int | float)}
    sft["world_size"] = 1
    # the RL stage's metrics.json numbers, as the demo's run wrote them
    rl_keys = ["f_tau_final", "final_steps", "format_reward_final", "kappa_final", "policy_version", "prompts",
               "reward_first", "reward_last", "steps"]  # fmt: skip
    for name, metrics in (("SFT", sft), ("RL", dict.fromkeys(rl_keys, 0.5))):
        section = {"name": name, "output": "x", "metrics": metrics, "plots": {}}
        text = render.training_markdown(section)
        for key in metrics:
            note = render.metric_note(name, key)
            assert note and f"| {key} | {metrics[key]:.6g} | {note} |" in text, (name, key)
        page = render.report_html(
            "t", eval_table=[], training=[section], trend=None, trend_png_bytes=None, today=""
        )
        assert render.metric_note("RL", "kappa_final") in page or name == "SFT"
    assert (
        render.metric_note("RL", "kappa_final")
        == "kappa: tool calls per rollout, mean over the last final_steps steps"
    )


def _trajectory_line(step: int, turns: list) -> str:
    """One line of the RL stage's trajectories/step_*.jsonl, from the agent's own records."""
    from paravt_core.agent.episode import EpisodeResult

    episode = EpisodeResult(
        f"rl-{step}", "v.mp4", "When does the <b>red</b> square appear?", "answer", answer="2.0, 4.5"
    )
    episode.turns = turns
    return json.dumps({"step": step, "reward": {"total": 0.75}, "episode": episode.to_dict()}) + "\n"


def test_report_renders_the_rl_trajectory_with_the_most_parallel_calls(tmp_path) -> None:
    """The demo's report shows the method at work: the sampled RL episode with the most tool calls in one
    turn, its think, its <tool_call> blocks, each call's result text and the answer, escaped."""
    from paravt_core.agent.episode import CallRecord, TurnRecord

    rl = tmp_path / "rl"
    storage.write_bytes(storage.join(str(rl), "metrics.json"), json.dumps({"steps": 2}).encode())
    one = TurnRecord(0, '<think>one</think><tool_call>{"name": "crop_video"}</tool_call>', 20, "stop", 0.1)
    one.calls = [CallRecord(0, 0, "tool_call", "", "crop_video", {"start_time": 0, "end_time": 1}, True)]
    think = "<think>look at 0-3 s and 3-6 s</think>\n"
    block = '<tool_call>{"name": "crop_video", "arguments": {"start_time": %d, "end_time": %d}}</tool_call>'
    both = TurnRecord(
        0, think + block % (0, 3) + "\n" + block % (3, 6) + "<script>x</script>", 60, "stop", 0.2
    )
    both.calls = [
        CallRecord(0, 0, "tool_call", "", "crop_video", {"start_time": 0, "end_time": 3}, True, True, True,
                   report="a <red> square enters at 2 s"),
        CallRecord(0, 1, "tool_call", "", "crop_video", {"start_time": 3, "end_time": 6}, True, True,
                   error="window past the video's end"),
    ]  # fmt: skip
    final = TurnRecord(1, "<think>seen \x1b it</think><answer>2.0, 4.5</answer>", 12, "stop", 0.1)
    storage.write_bytes(
        storage.join(str(rl), "trajectories", "step_00000000.jsonl"), _trajectory_line(0, [one]).encode()
    )
    storage.write_bytes(
        storage.join(str(rl), "trajectories", "step_00000001.jsonl"),
        (_trajectory_line(1, [one, final]) + _trajectory_line(1, [both, final])).encode(),
    )
    run(ReportConfig.model_validate({"output": str(tmp_path / "rep"), "rl_output": str(rl)}))

    md = (tmp_path / "rep" / "report.md").read_text()
    # step_00000001's second line: 2 calls in its first turn (the others: 1); steps print from 1
    assert "RL step 2, prompt rl-1: 2 parallel tool calls in one turn" in md
    assert "```text\n" + think + block % (0, 3) + "\n" + block % (3, 6) + "<script>x</script>\n```" in md
    assert 'call 1: crop\\_video({"end\\_time": 3, "start\\_time": 0})' in md
    assert "```text\na <red> square enters at 2 s\n```" in md
    assert "```text\nerror: window past the video's end\n```" in md
    assert "<think>seen \\u001b it</think><answer>2.0, 4.5</answer>" in md  # control character made visible
    assert "Answer: 2.0, 4.5 (episode ended: answer; reward 0.75)" in md
    assert "\x1b" not in md

    page = (tmp_path / "rep" / "report.html").read_text()
    assert "<script>" not in page and "&lt;script&gt;x&lt;/script&gt;" in page
    assert "&lt;tool_call&gt;{&quot;name&quot;: &quot;crop_video&quot;" in page
    assert "a &lt;red&gt; square enters at 2 s" in page and "When does the &lt;b&gt;red&lt;/b&gt;" in page


def test_report_says_so_when_no_trajectory_has_parallel_calls(tmp_path) -> None:
    from paravt_core.report import trajectory

    line = json.loads(_trajectory_line(0, []))
    assert trajectory.heading(line) == (
        "RL step 1, prompt rl-0: no sampled trajectory has a tool call; shown: the first one sampled."
    )
    line["episode"]["turns"] = [{"turn": 0, "text": "x", "calls": [{"index": 0}]}]
    assert "no sampled trajectory has parallel tool calls (at most one call in a turn)" in trajectory.heading(
        line
    )


def test_report_names_the_unit_links_the_eval_report_and_says_0_is_expected_for_the_tiny_model(
    tmp_path,
) -> None:
    """The headline column has its unit; each eval output's own report.html is linked (relative to the
    report); a chain that descends from `paravt tiny-model` (SFT from it, RL from SFT's final, eval from
    RL's final) carries the "0 % is expected" note in the report itself, and another model does not."""
    tiny, sft, rl, ev = (tmp_path / n for n in ("tiny-model", "run/sft", "run/rl", "run/eval/synthetic"))
    (tiny / ".paravt-tiny-model").parent.mkdir(parents=True)
    (tiny / ".paravt-tiny-model").write_text('{"seed": 0}\n')
    for out, config in ((sft, f"model:\n  uri: {tiny}\n"), (rl, f"model: {sft}/final\n"),
                        (ev, f"model: {rl}/final\n")):  # fmt: skip
        out.mkdir(parents=True)
        (out / "config.yaml").write_text(config)
    _eval_output(str(ev), "synthetic", {"agentic": 0.0, "direct": 0.0})
    (ev / "report.html").write_text("<html></html>")

    run(ReportConfig.model_validate({"output": str(tmp_path / "run/report"), "eval_outputs": [str(ev)]}))
    md = (tmp_path / "run/report/report.md").read_text()
    page = (tmp_path / "run/report/report.html").read_text()
    assert "| benchmark | protocol | headline, % (accuracy; Charades: mIoU) |" in md
    assert "<th>headline, % (accuracy; Charades: mIoU)</th>" in page
    assert (
        "Per-benchmark eval report (synthetic): [../eval/synthetic/report.html](../eval/synthetic/report.html)"
        in md
    )
    assert "<a href='../eval/synthetic/report.html'>" in page
    assert f"tiny, randomly initialised Qwen3-VL of `paravt tiny-model` ({tiny})" in md
    assert "0 % (or chance) is the expected score" in md and "0 % (or chance) is the expected score" in page

    (tiny / ".paravt-tiny-model").unlink()  # the same chain from a model that is not the tiny one
    cfg = {"output": str(tmp_path / "other"), "eval_outputs": [str(ev)], "sft_output": "", "rl_output": ""}
    run(ReportConfig.model_validate(cfg))
    assert "expected score" not in (tmp_path / "other/report.md").read_text()
