"""The demo's console: the runner's task lines parsed from its log, the per-stage numbers, the redirection
that keeps subprocess output off the console. (The whole demo runs the train DAG that
test_pipeline_train_local.py already runs; these check the presentation on its own, in seconds.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pipelines.demo_console import TaskWatcher, output_to_log, parse_task_events, stage_summary
from tests.support.paths import ROOT

# Two lines as kfp 2.17's local orchestrator writes them (task names coloured), between executor noise.
LOG = (
    "06:12:50.072 - INFO - Executing task \x1b[96m'data-op'\x1b[0m\n"
    '[KFP Executor 2026-11-25 06:12:51,000 INFO]: {"inputs": {"parameterValues": {}}}\n'
    "06:12:52.002 - INFO - Task \x1b[96m'data-op'\x1b[0m finished with status \x1b[92mSUCCESS\x1b[0m\n"
    "06:12:52.004 - INFO - Executing task \x1b[96m'sft-op'\x1b[0m\n"
    "23:59:59.500 - INFO - Task \x1b[96m'sft-op'\x1b[0m finished with status \x1b[91mFAILURE\x1b[0m\n"
)


def test_task_events_are_read_through_the_colour_codes() -> None:
    events = parse_task_events(LOG)
    assert [(e.task, e.status) for e in events] == [
        ("data-op", None),
        ("data-op", "SUCCESS"),
        ("sft-op", None),
        ("sft-op", "FAILURE"),
    ]
    assert events[0].seconds == 6 * 3600 + 12 * 60 + 50.072
    assert round(events[1].seconds - events[0].seconds, 3) == 1.93  # 52.002 - 50.072


def test_the_watcher_reports_each_finished_task_once_with_its_duration(tmp_path: Path) -> None:
    log = tmp_path / "demo.log"
    seen: list[tuple[str, str, float]] = []
    with TaskWatcher(log, lambda t, s, d: seen.append((t, s, round(d, 3))), poll_s=0.01):
        log.write_text(LOG)
    # sft started 06:12:52.004 and "finished" 23:59:59.500 the same day: 17 h 47 min 7.496 s
    assert seen == [("data-op", "SUCCESS", 1.93), ("sft-op", "FAILURE", 64027.496)]


def test_a_rerun_reports_only_its_own_tasks_not_the_previous_runs(tmp_path: Path) -> None:
    """demo.log is appended to: a second demo in the same directory must not print the first one's lines
    (with their old times) again."""
    log = tmp_path / "demo.log"
    log.write_text(LOG)  # the earlier run: data-op and sft-op
    seen: list[tuple[str, str, float]] = []
    again = (
        "07:00:00.000 - INFO - Executing task \x1b[96m'rl-op'\x1b[0m\n"
        "07:00:03.250 - INFO - Task \x1b[96m'rl-op'\x1b[0m finished with status \x1b[92mSUCCESS\x1b[0m\n"
    )
    with (
        TaskWatcher(log, lambda t, s, d: seen.append((t, s, round(d, 3))), poll_s=0.01),
        open(log, "a") as fh,
    ):
        fh.write(again)
    assert seen == [("rl-op", "SUCCESS", 3.25)]


def test_stage_lines_carry_the_stages_own_numbers(tmp_path: Path) -> None:
    run, data = tmp_path / "run", tmp_path / "data"
    for path, metrics in {
        data: {"sft_rows": 47, "rl_rows": 24, "rejected": 1},
        run / "sft": {"steps": 30, "loss_first": 6.6258, "loss_last": 3.678, "rows_used": 53},
        run / "rl": {"steps": 3, "prompts": 24, "reward_first": 0.0625, "reward_last": 0.05625},
        run / "eval" / "synthetic": {
            "agentic.synthetic.accuracy": 25.0,  # the eval stage's scale: percent (eval/metrics.py)
            "direct.synthetic.accuracy": 0.0,
            "agentic.synthetic.errors": 0.0,
            "total.samples": 16.0,
            "total.errors": 1.0,
        },
    }.items():
        path.mkdir(parents=True)
        (path / "metrics.json").write_text(json.dumps(metrics))
    assert stage_summary("data-op", run, data) == "47 SFT + 24 RL rows kept, 1 rejected"
    assert stage_summary("sft-op", run, data) == "30 steps, loss 6.63 -> 3.68, 53 rows used"
    assert (
        stage_summary("rl-op", run, data)
        == "3 PARA-GRPO steps over 24 RL prompts, mean reward 0.062 -> 0.056"
    )
    assert stage_summary("eval-op", run, data) == "synthetic: agentic 25%, direct 0% (16 answers, 1 errors)"
    assert stage_summary("eval-shards-op", run, data) == "one eval task per benchmark and shard"


def test_subprocess_output_goes_to_the_log_and_the_console_stays_plain(tmp_path: Path) -> None:
    """Through a real interpreter (real file descriptors): a child process's stdout and stderr land in the
    log; only what is written to the yielded console reaches the terminal (here: the pipe)."""
    script = (
        "import subprocess, sys\n"
        "from pathlib import Path\n"
        "from pipelines.demo_console import output_to_log\n"
        f"with output_to_log(Path({str(tmp_path / 'demo.log')!r})) as console:\n"
        "    print('python stdout', flush=True)\n"
        "    print('python stderr', file=sys.stderr, flush=True)\n"
        "    subprocess.run([sys.executable, '-c', 'import sys; print(1); print(2, file=sys.stderr)'])\n"
        "    console.write('one line\\n')\n"
        "print('after')\n"
    )
    repo = ROOT
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=repo, timeout=60, check=True
    )
    assert done.stdout == "one line\nafter\n" and done.stderr == ""
    assert (tmp_path / "demo.log").read_text().split() == ["python", "stdout", "python", "stderr", "1", "2"]


def test_output_to_log_without_file_descriptors(tmp_path: Path, capsys) -> None:
    """Under pytest's capture sys.stdout has no descriptor: Python-level output is redirected instead."""
    with output_to_log(tmp_path / "demo.log") as console:
        print("to the log")
        console.write("to the console\n")
    assert "to the log" in (tmp_path / "demo.log").read_text()
