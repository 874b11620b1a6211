"""Resume on restart after the stage's processes are killed (what a lost pod or node does: SIGKILL, no
cleanup, no exception). The SFT component runs through Kubeflow's own local runner
(``kfp.local.SubprocessRunner``) in a separate process group; once its step-10 checkpoint is complete
the whole group is SIGKILLed mid-run; running the same task again (what a KFP retry or
``paravt pipeline retry`` does: same inputs, same output URI) resumes from the newest complete
checkpoint and finishes.

Whatever reruns the task (Argo under the cluster's retry policy, argo-workflows v4.0.5 workflow/controller/
operator.go processNodeRetries; the stage's own in-pod rerun; ``paravt pipeline retry``), this resume path
is the one it relies on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from paravt_core import checkpoint
from tests.support.paths import ROOT

STEPS = 30  # the tiny recipe checkpoints every 10 steps

DRIVER = textwrap.dedent(
    """
    import sys
    from kfp import dsl, local
    from components.sft import sft_op

    pipeline_root, config, data, model, output, work = sys.argv[1:7]

    @dsl.pipeline
    def sft_alone() -> str:
        # The data stage's output brought in as a Dataset (what the train DAG's data task hands over).
        dataset = dsl.importer(artifact_uri=data, artifact_class=dsl.Dataset)
        return sft_op(
            config_yaml=open(config).read(),
            overrides=[f"work_dir={work}", f"trainer.steps={STEPS}"],
            data=dataset.output,
            model_uri=model,
            output=output,
        ).outputs["Output"]

    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=pipeline_root)
    print("FINAL", sft_alone().output)
    """
).replace("{STEPS}", str(STEPS))


def _start(tmp: Path, data: str, model: str, output: Path, attempt: int) -> subprocess.Popen:
    driver = tmp / "driver.py"
    driver.write_text(DRIVER)
    args = [str(tmp / f"kfp-{attempt}"), str(ROOT / "configs" / "sft" / "tiny.yaml"), data, model]
    args += [str(output), str(tmp / "work")]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    log = open(tmp / f"attempt-{attempt}.log", "w")  # noqa: SIM115 (closed with the process)
    return subprocess.Popen(
        [sys.executable, str(driver), *args],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the kill takes the runner and the stage together
    )


def _complete_steps(output: Path) -> list[int]:
    return [step for step, _, ok in checkpoint.list_checkpoints(str(output)) if ok]


def test_sft_task_killed_mid_run_resumes_when_rerun(sft_data_output, tiny_model_dir, tmp_path) -> None:
    output = tmp_path / "sft"
    first = _start(tmp_path, sft_data_output, tiny_model_dir, output, 1)
    deadline = time.monotonic() + 600
    try:
        while not _complete_steps(output):
            assert first.poll() is None, (tmp_path / "attempt-1.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint within 600 s"
            time.sleep(0.05)
        os.killpg(first.pid, signal.SIGKILL)
    finally:
        first.wait()
    assert first.returncode == -signal.SIGKILL
    at_kill = _complete_steps(output)
    # Killed mid-run: a checkpoint is complete, the run is not.
    assert at_kill and max(at_kill) < STEPS
    assert not (output / "final" / "_COMPLETE").exists() and not (output / "metrics.json").exists()

    second = _start(tmp_path, sft_data_output, tiny_model_dir, output, 2)
    assert second.wait(timeout=600) == 0, (tmp_path / "attempt-2.log").read_text()[-3000:]
    summary = json.loads((output / "metrics.json").read_text())
    assert summary["resumed_from"].rstrip("/") == checkpoint.step_dir(str(output), max(at_kill)).rstrip("/")
    assert (output / "final" / "_COMPLETE").exists()
    assert f"FINAL {output / 'final'}" in (tmp_path / "attempt-2.log").read_text()
