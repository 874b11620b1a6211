"""``paravt_core/rl/stage.py``'s rules that its stage tests left open (the survivors of its mutation
run), each worked out by hand: the data line, the fleet's refusal, the resume's reference check, rank 0's word
on a failed push, a reused output's plain line, and a run of the tiny model on a terminal, grown by one step
(its console line, its text points, ``metrics.json`` as written, the checkpoint's state, the resume)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from rich.console import Console
from rich.text import Text

from paravt_core import checkpoint, storage
from paravt_core.config import ConfigError, load_config
from paravt_core.rl import stage
from paravt_core.rl.config import RlConfig
from paravt_core.rl.push import WeightPush
from paravt_core.rl.stage import _announce_data, _check_engine, _check_resume, _reused, run
from paravt_core.rl.weight_sync import PushFailed
from paravt_core.train.dist import Dist
from tests.support.paths import ROOT
from tests.support.ports import free_port
from tests.support.rl_support import tiny_rl_config
from tests.support.tracking_support import raw_points


@pytest.fixture
def shown(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """What the stage prints, through a terminal console (colours on, wide: no wrapping)."""
    text = io.StringIO()
    console = Console(file=text, width=400, force_terminal=True, color_system="truecolor")
    monkeypatch.setattr(stage, "console", console)
    return text


def _strip(text: str) -> str:
    """The text without terminal styling (rich highlights numbers in the data line)."""
    return Text.from_ansi(text).plain


def test_the_data_line(shown: io.StringIO) -> None:
    data = SimpleNamespace(prompts=[1, 2, 3], files=["a", "b"], skipped={"no_video": 2, "bad_json": 1})
    _announce_data(data, Dist())
    _announce_data(SimpleNamespace(prompts=[1], files=["a"], skipped={}), Dist(world=2, sharded=True))
    assert _strip(shown.getvalue()).splitlines() == [
        "rl: 3 prompts from 2 file(s), 3 rows skipped (bad_json=1, no_video=2)",
        "rl: 1 prompts from 1 file(s), no row skipped, learner sharded over 2 ranks",
    ]


def test_a_fleet_with_nccl_pushes_is_refused_in_one_line(tmp_path: Path) -> None:
    cfg = tiny_rl_config(
        "d", "m", str(tmp_path / "out"), "engine.kind=sglang", "engine.servers=2",
        "engine.base_url=http://127.0.0.1:1", "engine.weight_sync=distributed",
    )  # fmt: skip
    with pytest.raises(ConfigError) as err:
        _check_engine(cfg, Dist())
    assert str(err.value) == "a rollout fleet takes weight pushes from disk: engine.weight_sync=disk"


def test_a_checkpoint_resumes_only_against_its_reference(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cfg = tiny_rl_config("d", "m", str(out))
    _check_resume(cfg, "/models/ref")  # no checkpoint: nothing to check
    step = checkpoint.step_dir(str(out), 4)
    Path(step).mkdir(parents=True)
    Path(step, "trainer.json").write_text(json.dumps({"step": 4, "reference_model": "/models/ref"}))
    storage.mark_complete(step)
    _check_resume(cfg, "/models/ref")
    _check_resume(cfg, "/models/ref/")  # the same folder
    with pytest.raises(ConfigError) as err:
        _check_resume(cfg, "/models/other")
    assert str(err.value) == (
        f"checkpoint {step} was trained against reference '/models/ref', not '/models/other'"
    )


def test_every_rank_learns_rank_0s_failed_push() -> None:
    run_ = WeightPush(Dist(), learner=None, sync=None, dtype=None)  # only the process group is used
    run_.agree(None)
    cut = PushFailed("the push was cut at bucket 3")
    with pytest.raises(PushFailed) as err:
        run_.agree(cut)
    assert err.value is cut
    other = ValueError("server gone")
    with pytest.raises(ValueError) as err2:
        run_.agree(other)
    assert err2.value is other


def test_a_reused_output_says_so_in_a_plain_line(tmp_path: Path, shown: io.StringIO) -> None:
    out = tmp_path / "out"
    out.mkdir()
    summary = {"steps": 2, "reward_last": 0.5, "last_step": {"step": 1}, "f_tau_curve": [0.1]}
    (out / "metrics.json").write_text(json.dumps(summary))
    result = _reused(tiny_rl_config("d", "m", str(out)))
    # no highlighting on a terminal: the path is not coloured apart from the rest
    assert shown.getvalue() == f"paravt rl: {out} is complete with the same config; reused, nothing to do\n"
    assert result.metrics == {"steps": 2, "reward_last": 0.5, "reused_output": True}
    assert result.outputs["final"] == str(out / "final")


def test_a_run_on_a_terminal_grown_by_a_step(
    rl_data: str,
    tiny_model_dir: str,
    tmp_path: Path,
    shown: io.StringIO,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stage, "is_terminal", lambda: True)  # the console line, not the pod-log progress
    out = tmp_path / "rl"
    common = ["checkpoint.every=1", "tracking.backends=[tensorboard]", "tracking.text_every=1"]
    run(tiny_rl_config(rl_data, tiny_model_dir, str(out), "steps=1", *common))
    trainer = json.loads((out / "checkpoints" / "step_00000001" / "trainer.json").read_text())
    cfg = tiny_rl_config(rl_data, tiny_model_dir, str(out), "steps=2", *common)
    assert trainer["data_position"] == 1 * cfg.prompts_per_step
    run(cfg)  # more steps: the run resumes from step 1

    history = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in history] == [0, 1]
    lines = [x for x in _strip(shown.getvalue()).splitlines() if x.startswith("rl step ")]
    assert [x.split(":")[0] for x in lines] == ["rl step 1/1", "rl step 2/2"]
    for line, m in zip(lines, history, strict=True):
        assert (
            f"reward {m['reward_mean']:.3f} (acc {m['accuracy_mean']:.3f} fmt {m['format_mean']:.3f} "
            f"tool {m['tool_mean']:.3f}) loss {m['loss']:.3g}" in line
        )
    texts = sorted(s for tag, s in raw_points(out / "tensorboard") if tag.startswith("rollout/trajectory"))
    assert texts == [1, 2]  # one trajectory a step, at the step counted from 1
    written = (out / "metrics.json").read_text()
    summary = json.loads(written)
    assert written == json.dumps(summary, indent=2)
    assert (summary["reward_first"], summary["reward_last"]) == (
        history[0]["reward_mean"],
        history[1]["reward_mean"],
    )


def test_engine_max_concurrency_bounds_the_requests_at_the_server(
    rl_data: str,
    tiny_model_dir: str,
    tmp_path: Path,
) -> None:
    """A server engine gets every episode turn on its own (``IndependentEngine``), at most
    ``engine.max_concurrency`` at once: the step's 8 episodes (2 prompts x 4) would otherwise overlap."""
    from paravt_core.engines.sglang_engine import mm_process_config
    from paravt_core.engines.transformers_engine import TransformersEngine
    from paravt_core.models import load
    from tests.support.sglang_contract_server import _ContractServer

    served = load(tiny_model_dir)
    engine = TransformersEngine(served.model, served.processor)
    budget = tiny_rl_config(rl_data, tiny_model_dir, str(tmp_path / "out")).agent
    mm_config = mm_process_config(max_pixels=budget.max_pixels, min_pixels=budget.min_pixels)  # as launched
    with _ContractServer(engine, served.processor, mm_config=mm_config, delay_s=0.05) as server:
        cfg = tiny_rl_config(
            rl_data, tiny_model_dir, str(tmp_path / "out"), "steps=1", "engine.kind=sglang",
            f"engine.base_url={server.url}", f"engine.staging_dir={tmp_path / 'weights'}",
            "engine.max_concurrency=1",
        )  # fmt: skip
        run(cfg)
    assert cfg.prompts_per_step * cfg.group_size == 8
    assert sum(p == "/generate" for p, _ in server.calls) >= 8 and server.max_in_flight == 1


# 3 ----------------------------------------------------------------------------------------------------------
_DUMP_ENV = (
    "import os, sys; open(sys.argv[1], 'w').write(os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')); "
    "sys.exit(3)"
)


def test_the_server_the_rl_stage_starts_itself_gets_its_pinning(tiny_model_dir, tmp_path, monkeypatch):
    """The stage's own launch (no ``engine.base_url``, one learner process): ``engine.gpus`` reaches the
    process. Only SGLang's command is replaced (by the stand-in above); the process is really started."""
    from paravt_core.engines import sglang_engine
    from paravt_core.engines.base import EngineError
    from paravt_core.models import load
    from paravt_core.rl.stage import _rollout_engine
    from paravt_core.train.dist import Dist

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    dump = tmp_path / "env"
    monkeypatch.setattr(
        sglang_engine, "launch_command", lambda *a, **k: [sys.executable, "-c", _DUMP_ENV, str(dump)]
    )
    cfg = load_config(
        RlConfig,
        ROOT / "configs" / "rl" / "tiny.yaml",
        [f"model={tiny_model_dir}", f"output={tmp_path / 'out'}", "engine.kind=sglang", "engine.gpus=[2,3]",
         f"engine.port={free_port()}", f"engine.staging_dir={tmp_path / 'staging'}"],
    )  # fmt: skip
    with pytest.raises(EngineError, match="exited with code 3"):
        _rollout_engine(cfg, load(tiny_model_dir), "cpu", torch.float32, Dist())
    assert dump.read_text() == "2,3"
