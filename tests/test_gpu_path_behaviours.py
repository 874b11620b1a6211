"""Behaviours of the GPU-path code that no test pinned down before issue 41 (each shown by a hidden audit to
matter to a user): one test per behaviour, each checked against the one-line bug that breaks it (applied by
hand, seen to fail, reverted; the table is in docs/mutation.md, "Issue 41 behaviours")."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
from pathlib import Path

import pytest
import torch

from paravt_core.config import load_config
from paravt_core.rl.config import RlConfig
from scripts import gpu_check  # as scripts.gpu_check: the name mutmut gives its mutants
from tests.support.ports import free_port
from tests.test_gpu_check import _answer, checks_on  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]


# 1 ----------------------------------------------------------------------------------------------------------
def test_two_group_names_made_in_one_process_differ():
    """A retried attempt in the same container (PID 1, same pod hostname) must not re-join under a name that
    SGLang and torch already hold: host and PID alone do not tell two attempts apart."""
    from paravt_core.engines.sglang_engine import SGLangEngine
    from paravt_core.rl.weight_sync import NcclSync, unique_group_name

    a, b = unique_group_name(), unique_group_name()
    assert a != b
    prefix = f"paravt-{socket.gethostname()}-{os.getpid()}-"
    assert a.startswith(prefix) and b.startswith(prefix)

    def sync() -> NcclSync:  # nothing is contacted before the first push
        engine = SGLangEngine("http://127.0.0.1:9")
        return NcclSync(engine, master_address="127.0.0.1", master_port=9, server_ranks=1, backend="gloo")

    assert sync().group_name != sync().group_name
    engine = SGLangEngine("http://127.0.0.1:9")
    given = NcclSync(engine, master_address="h", master_port=1, server_ranks=1, group_name="mine")
    assert given.group_name == "mine"


# 2 ----------------------------------------------------------------------------------------------------------
def test_every_server_of_a_fleet_plan_is_told_the_served_dtype():
    from paravt_core.rl.launch import plan

    recipe = ROOT / "configs" / "rl" / "paragrpo_8b.yaml"  # dtype: bfloat16
    fleet = load_config(
        RlConfig, recipe, ["engine.servers=2", "engine.gpus=[6,7]", "engine.weight_sync=disk"]
    )
    p = plan(fleet, "/tmp/rl.yaml", gpus=8, model_dir="/m", python="python")
    assert len(p.fleet) == 2
    for cmd, _, _ in p.fleet:
        assert cmd[cmd.index("--dtype") + 1] == "bfloat16"
    single = load_config(RlConfig, recipe)
    cmd = plan(single, "/tmp/rl.yaml", gpus=8, model_dir="/m", python="python").server_command
    assert cmd[cmd.index("--dtype") + 1] == "bfloat16"


# 3 ----------------------------------------------------------------------------------------------------------
_DUMP_ENV = (
    "import os, sys; open(sys.argv[1], 'w').write(os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')); "
    "sys.exit(3)"
)


@pytest.mark.parametrize(
    ("overrides", "gpus", "port_offset"),
    [
        (["engine.gpus=[1]"], 2, 0),
        (["engine.servers=2", "engine.gpus=[1,2]", "engine.weight_sync=disk"], 3, 1),
    ],
    ids=["one-server", "fleet"],
)
def test_the_launched_server_process_gets_its_pinning(tiny_model_dir, tmp_path, monkeypatch, overrides, gpus,
                                                       port_offset):  # fmt: skip
    """``engine.gpus`` reaches the server process's environment, not only the plan: the server command (a
    stand-in that writes the ``CUDA_VISIBLE_DEVICES`` it sees, then exits 3) is started by ``launch``."""
    from paravt_core.engines.base import EngineError
    from paravt_core.rl.launch import launch

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    port = free_port()
    cfg = load_config(
        RlConfig,
        ROOT / "configs" / "rl" / "tiny.yaml",
        [f"model={tiny_model_dir}", f"output={tmp_path / 'out'}", "engine.kind=sglang", f"engine.port={port}",
         *overrides],
    )  # fmt: skip

    def server(model_dir: str, server_port: int) -> list[str]:
        return [sys.executable, "-c", _DUMP_ENV, str(tmp_path / f"env-{server_port}")]

    with pytest.raises(EngineError, match="exited with code 3"):
        launch(cfg, gpus=gpus, server_command=server, start_timeout_s=60)
    # the first (or only) server: the launcher waits for it first, so it has written before it exited
    assert (tmp_path / f"env-{port + port_offset}").read_text() == "1"


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


# 4, 5 -------------------------------------------------------------------------------------------------------
def _config_dtypes(folder: Path) -> dict[str, str]:
    config = json.loads((folder / "config.json").read_text())
    return {key: config[key]["dtype"] for key in ("text_config", "vision_config")} | {"": config["dtype"]}


def test_save_hf_writes_the_saved_tensors_dtype_when_none_is_given(tiny_model_dir, tmp_path):
    """``DiskSync`` and ``save_final`` pass no dtype by default: a bf16 state dict of a float32 module is
    written as bfloat16 and its config.json must say so (``save_pretrained`` records the module's float32)."""
    from paravt_core.checkpoint import save_hf
    from paravt_core.models import load

    model = load(tiny_model_dir).model
    state = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in model.state_dict().items()}
    save_hf(model, str(tmp_path / "bf16"), state, None)
    assert _config_dtypes(tmp_path / "bf16") == {"": "bfloat16", "text_config": "bfloat16",
                                                 "vision_config": "bfloat16"}  # fmt: skip
    save_hf(model, str(tmp_path / "fp32"), model.state_dict(), None)
    assert set(_config_dtypes(tmp_path / "fp32").values()) == {"float32"}


def test_saving_a_bf16_copy_leaves_the_live_models_config_float32(tiny_model_dir, tmp_path):
    from paravt_core.checkpoint import save_hf
    from paravt_core.models import load

    model = load(tiny_model_dir).model
    save_hf(model, str(tmp_path / "bf16"), model.state_dict(), torch.bfloat16)
    assert set(_config_dtypes(tmp_path / "bf16").values()) == {"bfloat16"}
    live = (model.config, model.config.text_config, model.config.vision_config)
    assert [str(c.dtype).removeprefix("torch.") for c in live] == ["float32"] * 3
    assert {p.dtype for p in model.parameters()} == {torch.float32}


# 6 ----------------------------------------------------------------------------------------------------------
def test_bars_off_restores_the_callers_state_in_both_directions():
    from transformers.utils import logging as hf_logging

    from paravt_core.models import hf_bars_off

    was = hf_logging.is_progress_bar_enabled()
    try:
        for before in (True, False, True):
            (hf_logging.enable_progress_bar if before else hf_logging.disable_progress_bar)()
            with hf_bars_off():
                assert not hf_logging.is_progress_bar_enabled()
            assert hf_logging.is_progress_bar_enabled() is before
            with pytest.raises(KeyError), hf_bars_off():  # a load that fails restores it too
                raise KeyError("x")
            assert hf_logging.is_progress_bar_enabled() is before
    finally:
        (hf_logging.enable_progress_bar if was else hf_logging.disable_progress_bar)()


# 7: tests/test_train_syncs.py (HostReads, with the module's other tests)


# 8 ----------------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _scandir_sorted(reverse: bool):
    """``os.scandir`` yielding names in a fixed order (the file system's own order is not ours to choose)."""
    import paravt_core.cli_errors as cli_errors

    real = os.scandir

    def scandir(path):
        with real(path) as it:
            return contextlib.nullcontext(sorted(it, key=lambda e: e.name, reverse=reverse))

    cli_errors.os.scandir = scandir
    try:
        yield
    finally:
        cli_errors.os.scandir = real


@pytest.mark.parametrize("reverse", [False, True], ids=["a-z", "z-a"])
def test_tidying_keeps_the_config_beside_a_checkpoint_and_empty_folders(tmp_path, reverse):
    from paravt_core.cli_errors import prune_unused

    out = tmp_path / "out"
    for empty in ("a-empty", "z-empty"):  # an empty folder is scanned last in either order
        (out / empty).mkdir(parents=True)
    (out / "checkpoint-1").mkdir()
    (out / "checkpoint-1" / "model.bin").write_bytes(b"weights")
    (out / "config.yaml").write_text("x: 1\n")
    with _scandir_sorted(reverse):
        assert prune_unused([str(out)]) == []
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == [
        "checkpoint-1", "checkpoint-1/model.bin", "config.yaml"
    ]  # fmt: skip


def test_the_removed_again_line_names_only_the_output_or_its_parents(tmp_path):
    from paravt_core.cli_errors import tidied_output_line

    root = str(tmp_path / "run-1")
    line = f"paravt sft: removed {root} again (it held only this failed run's config)"
    assert tidied_output_line("sft", root, [root]) == line
    assert tidied_output_line("sft", f"{root}/out", [root]) == line
    assert tidied_output_line("sft", f"file://{root}/out", [root]) == line
    assert tidied_output_line("sft", str(tmp_path / "run-10"), [root]) is None  # a sibling sharing the prefix
    assert tidied_output_line("sft", str(tmp_path / "run-1x" / "out"), [root]) is None
    assert tidied_output_line("sft", "s3://bucket/run-1", [root]) is None
    assert tidied_output_line("sft", "", [root]) is None


# 9 ----------------------------------------------------------------------------------------------------------
def test_eval_merge_without_benchmarks_of_its_own_is_accepted(tmp_path):
    from paravt_core.cli_errors import UsageError, preflight
    from tests.eval_support import tiny_eval_config

    preflight("eval", tiny_eval_config(tmp_path / "m", "tiny", [], merge=True))
    with pytest.raises(UsageError, match="no benchmarks configured"):
        preflight("eval", tiny_eval_config(tmp_path / "n", "tiny", []))


@pytest.mark.parametrize("saved_config", [True, False], ids=["config-saved", "no-config-saved"])
def test_a_shard_run_of_a_complete_output_evaluates_its_shard(
    tiny_model, eval_fixtures, tmp_path, saved_config
):
    """Without a saved config.yaml (an output made before it was saved, or copied without it) the changed-config
    rule has nothing to compare, and only the shard itself says the whole output is not what was asked for."""
    from paravt_core import storage
    from paravt_core.eval.records import shard_of
    from paravt_core.eval.stage import run
    from tests.eval_support import KeyedEngine, tiny_eval_config

    benches = [e for e in eval_fixtures if e["name"] == "mlvu"]
    engine = KeyedEngine(tiny_model.processor, {}, default="<answer>B</answer>")
    whole = run(tiny_eval_config(tmp_path, "tiny", benches, protocols=["direct"]), engine=engine,
                processor=tiny_model.processor)  # fmt: skip
    assert storage.is_complete(whole.outputs["eval"])
    ids = [json.loads(x)["id"] for x in (tmp_path / "eval" / "samples" / "direct" / "mlvu.jsonl").open()]
    mine = [i for i in ids if shard_of(i, 2) == 0]
    assert 0 < len(mine) < len(ids)  # the shard is a real part of the output
    if not saved_config:
        (tmp_path / "eval" / "config.yaml").unlink()
    shard = run(tiny_eval_config(tmp_path, "tiny", benches, protocols=["direct"], shard="0/2"), engine=engine,
                processor=tiny_model.processor)  # fmt: skip
    assert "reused_output" not in shard.metrics
    assert shard.metrics == {"records": len(mine)}
    assert shard.outputs == {"shard": str(tmp_path / "eval" / "shards" / "0-of-2")}
    assert storage.is_complete(shard.outputs["shard"])


# 10 ---------------------------------------------------------------------------------------------------------
def test_release_preset_aligns_subtitles_to_its_own_frame_count(tmp_path):
    """Video-MME with aligned subtitles under ``preset=release`` keeps the cues covering the preset's 64 frames,
    whatever ``agent.overview_frames`` (4 here) says. 40 frames at 4 fps: 64 samples cover every frame, so
    every cue is kept; 4 samples (0, 13, 26, 39) miss the cue of seconds 2-3 (frames 8-11)."""
    from paravt_core.eval.stage import _samples_by_bench
    from tests.eval_support import SUBTITLED_ROW, tiny_eval_config, write_subtitled_video

    write_subtitled_video(tmp_path)
    row = dict(SUBTITLED_ROW)
    (tmp_path / "rows.json").write_text(json.dumps([row]))
    bench = {"name": "videomme_wsub", "source": str(tmp_path / "rows.json"), "media_root": str(tmp_path),
             "subtitle_mode": "aligned"}  # fmt: skip

    def question(preset: str) -> str:
        cfg = tiny_eval_config(tmp_path / preset, "tiny", [bench], preset=preset)
        assert cfg.agent.overview_frames == 4
        ((sample,),) = _samples_by_bench(cfg, str(tmp_path / preset / "work")).values()
        return sample.question

    assert "skipped" in question("release") and "middle" in question("release")
    assert "skipped" not in question("paravt") and "middle" in question("paravt")  # 4 frames: the agent's


# 11 ---------------------------------------------------------------------------------------------------------
def test_gpu_check_refuses_a_checksum_unless_every_rank_reported_one():
    two = _answer({"lm_head.weight": "01"}, "cd" * 32)
    two["ranks"].append({**two["ranks"][0], "checksums": {}})  # rank 1 answered no tensor checksums
    with pytest.raises(AssertionError, match="no tensor checksums"):
        gpu_check.checksum_of(two)
    two["ranks"][1]["checksums"] = {"lm_head.weight": "02"}
    assert gpu_check.checksum_of(two) == "cd" * 32


def test_gpu_check_served_scores_check_which_tokens_were_scored():
    prompt = [[None, 7, None], [-0.5, 8, None]]
    answer = {"meta_info": {"input_token_logprobs": [*prompt, [-1.25, 11, None], [-2.5, 12, None]]}}
    assert gpu_check.served_scores(answer, [11, 12]) == [-1.25, -2.5]
    with pytest.raises(AssertionError, match=r"scored tokens \[11, 12\], not the continuation \[12, 11\]"):
        gpu_check.served_scores(answer, [12, 11])  # as many tokens, other ones
    with pytest.raises(AssertionError, match=r"scored tokens \[\], not the continuation"):
        gpu_check.served_scores(answer, [1, 2, 3, 4, 5])


class _ThirdWeightsSync:
    """The NCCL push's effect on the stand-in server: it ends up holding weights that are neither the launch
    weights nor the disk push's (a push that landed wrong)."""

    server = None

    def __init__(self, client, **_):
        self.pushed_buckets = [1]

    def push(self, weights, version):
        self.server.model.load_state_dict(
            {k: v + 0.25 if v.is_floating_point() else v for k, v in weights.items()}
        )


def test_gpu_check_nccl_push_fails_whenever_the_launch_checksum_does_not_come_back(
    checks_on,  # noqa: F811
    tiny_model_dir,
    monkeypatch,
):
    import paravt_core.rl.weight_sync as weight_sync

    monkeypatch.setattr(weight_sync, "NcclSync", _ThirdWeightsSync)
    checks = checks_on(tiny_model_dir)
    checks.disk_push()
    _ThirdWeightsSync.server = checks.stand_in
    with pytest.raises(AssertionError, match="not the launch weights'") as err:
        checks.nccl_push()
    assert "still the disk push's" not in str(err.value)
