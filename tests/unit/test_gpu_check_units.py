"""Unit checks of ``scripts/gpu_check.py`` with values worked out by hand: the exact commands and overrides it
runs, the scoring body, verdict strings, the report, and the GPU-only items (``sglang_launch``, ``rl_step``,
the SFT items) driven with stand-ins for the server process, the checksum reads and the training command."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from scripts import gpu_check  # as scripts.gpu_check: the name mutmut gives its mutants
from tests.support.gpu_check_standins import LoadingSync, weights_checker_answer
from tests.support.paths import ROOT


def test_image_control_failure_names_what_it_cannot_tell():
    with pytest.raises(AssertionError) as err:
        gpu_check.image_control([-1.0], [-1.0], [-1.0], [-1.0])
    assert str(err.value) == (
        "images A vs B move the continuation by 0.0000 nats/token on the server and 0.0000 here, not more "
        "than 10 x the served-vs-local gap 0.0000: the parity cannot tell a server that mis-embeds images"
    )


def test_logprob_gap_names_the_worst_token_not_the_last():
    # gaps 0.5 (token 0) and 0.0 (token 1): the worst is token 0
    with pytest.raises(
        AssertionError, match=r"differ by 0\.500 > 0\.25 at token 0 \(served -1\.000, ours -1\.500\)"
    ):
        gpu_check.logprob_gap([-1.0, -2.0], [-1.5, -2.0])
    assert (
        gpu_check.logprob_gap([-1.0, -2.0], [-1.2, -2.0]) == "2 tokens, max log-prob gap 0.2000, mean 0.1000"
    )


def test_score_payload_scores_every_input_token_with_one_new_token():
    request = SimpleNamespace(input_ids=[5, 6], images=[])
    body = gpu_check.score_payload(request, [7, 8], image_token_id=99)
    assert body["input_ids"] == [5, 6, 7, 8]
    assert body["logprob_start_len"] == 0 and body["return_logprob"] is True
    assert body["sampling_params"]["max_new_tokens"] == 1 and body["sampling_params"]["temperature"] == 0.0


def test_tensor_checksums_name_each_ranks_tensors_and_pass_the_timeout(monkeypatch):
    import httpx

    calls = []

    def post(url, **kwargs):
        calls.append((url, kwargs))
        return SimpleNamespace(json=lambda: weights_checker_answer({"w": "00", "v": "11"}, "cd" * 32))

    monkeypatch.setattr(httpx, "post", post)
    assert gpu_check.tensor_checksums("http://s:1", timeout_s=12.5) == {"0:w": "00", "0:v": "11"}
    assert calls == [("http://s:1/weights_checker", {"json": {"action": "checksum"}, "timeout": 12.5})]


def test_write_report_exact(tmp_path):
    items = [
        gpu_check.Item("sft_step", "pass", "1 step | ok\nsecond line", 1.5),
        gpu_check.Item("rl_step", "fail", "  ", 0.0),
    ]
    path = gpu_check.write_report(items, tmp_path / "new", {"torch": "2.9", "gpus": 2})
    assert path == tmp_path / "new" / "gpu-check.md"
    assert path.read_text() == (
        "# GPU check\n\n- torch: 2.9\n- gpus: 2\n\n| item | result | seconds | detail |\n|---|---|---|---|\n"
        "| sft_step | PASS | 1.5 | 1 step / ok |\n| rl_step | FAIL | 0.0 |  |\n\n1/2 passed\n"
    )


def test_sft_commands_exact():
    config = str(ROOT / "configs" / "sft")
    tail = [
        "model.uri=/m", "data.input=/d", "output=/o",
        "trainer.steps=1", "trainer.grad_accum=1", "checkpoint.every=1", "data.num_workers=2",
    ]  # fmt: skip
    assert gpu_check.sft_command("/m", "/d", "/o", python="py", nproc=2) == [
        "py", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "paravt_core.cli",
        "sft", "--config", config + "/qwen3vl_8b.yaml", *tail,
    ]  # fmt: skip
    assert gpu_check.sft_command("/m", "/d", "/o", python="py", tiny=True) == [
        "py", "-m", "paravt_core.cli", "sft", "--config", config + "/tiny.yaml", *tail,
    ]  # fmt: skip


def test_rl_overrides_exact():
    assert gpu_check.rl_overrides("/m", "/d", "/o", 30005) == [
        "model=/m", "data=/d", "output=/o", "device=cuda", "dtype=bfloat16", "steps=1", "checkpoint.every=1",
        "engine.kind=sglang", "engine.weight_sync=distributed", "engine.gpus=[1]", "engine.port=30005",
        "agent.max_pixels=50176", "agent.min_pixels=1024",
    ]  # fmt: skip


def test_rl_plan_writes_its_config_in_a_new_folder_and_passes_it_to_the_learner(tmp_path):
    from paravt_core.config import load_config
    from paravt_core.rl.config import RlConfig

    config = tmp_path / "a" / "b" / "rl.yaml"
    p = gpu_check.rl_plan("/m", "/d", "/o", 30005, str(config), python="py")
    cfg = load_config(RlConfig, config, [])
    assert (cfg.engine.kind, cfg.engine.port, cfg.output) == ("sglang", 30005, "/o")
    assert str(config) in p.learner_command and p.learner_command[0] == "py"


def test_with_model_path_replaces_only_the_model_path():
    command = ["py", "-m", "sglang.launch_server", "--model-path", "/old", "--port", "1"]
    assert gpu_check.with_model_path(command, "/new") == [
        "py", "-m", "sglang.launch_server", "--model-path", "/new", "--port", "1",
    ]  # fmt: skip


def _rl_outputs(path: Path, step: dict) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "metrics.jsonl").write_text(json.dumps(step) + "\n")
    (path / "metrics.json").write_text(json.dumps({"policy_version": 1}))
    return path


def test_rl_verdict_without_trained_sequences_and_its_checksum_message(tmp_path):
    a, b, c = "a" * 64, "b" * 64, "c" * 64
    with pytest.raises(AssertionError, match=r"trained no sequence \(trained_sequences 0\)"):
        gpu_check.rl_verdict(_rl_outputs(tmp_path, {"step": 0}), a, b, b)
    with pytest.raises(AssertionError) as err:
        gpu_check.rl_verdict(_rl_outputs(tmp_path, {"trained_sequences": 2}), a, b, c)
    assert str(err.value) == (
        "the pushed server's checksum bbbbbbbbbbbb is not the saved final's cccccccccccc: the push landed "
        "other weights than the learner's"
    )


def test_gpu_checks_defaults(tmp_path):
    checks = gpu_check.GpuChecks(tmp_path, 7)
    assert (checks.model_dir, checks.data_dir, checks.tiny, checks.device) == (
        str(tmp_path / "qwen3vl-2b-random"), str(tmp_path / "data"), False, "cuda:0",
    )  # fmt: skip
    assert gpu_check.GpuChecks(tmp_path, 7, tiny=True).model_dir == str(tmp_path / "tiny-model")


def test_prepare_passes_work_and_tiny(tmp_path, monkeypatch):
    import scripts.gpu_profile as gpu_profile

    seen = []
    monkeypatch.setattr(gpu_profile, "prepare", lambda work, tiny: seen.append((work, tiny)))
    gpu_check.GpuChecks(tmp_path, 0).prepare()
    gpu_check.GpuChecks(tmp_path, 0, tiny=True).prepare()
    assert seen == [(tmp_path, False), (tmp_path, True)]


def test_perturbed_weights_are_seeded_with_1(tmp_path):
    import torch

    model = torch.nn.Linear(3, 2)
    checks = gpu_check.GpuChecks(tmp_path, 0, device="cpu")
    checks.local = SimpleNamespace(model=model)
    g = torch.Generator(device="cpu").manual_seed(1)  # state_dict order: weight, then bias
    expected = {
        k: v.detach() + 0.02 * torch.randn(v.shape, generator=g) for k, v in model.state_dict().items()
    }
    got = checks._perturbed()
    assert got.keys() == expected.keys() and all(torch.equal(got[k], expected[k]) for k in expected)


# -- the SFT items with the training command stood in for: it writes the metrics a one-step run writes -----


def _fake_training(monkeypatch, records: list[dict]) -> list:
    ran = []

    def run(command, check):
        ran.append((command, check))
        out = Path(next(a for a in command if a.startswith("output=")).removeprefix("output="))
        out.mkdir(parents=True)
        (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    monkeypatch.setattr(gpu_check.subprocess, "run", run)
    return ran


def test_sft_step_runs_the_command_and_reports_the_step(tmp_path, monkeypatch):
    ran = _fake_training(monkeypatch, [{"loss": 2.5, "grad_norm": 0.5, "tokens": 10, "peak_mem_gib": 1.0}])
    checks = gpu_check.GpuChecks(tmp_path / "work", 0, device="cpu", tiny=True)
    assert checks.sft_step() == (
        '1 FSDP2 step on 1 GPU(s): {"loss": 2.5, "grad_norm": 0.5, "tokens": 10, "peak_mem_gib": 1.0}'
    )
    work = tmp_path / "work"
    assert ran == [
        (
            gpu_check.sft_command(str(work / "tiny-model"), str(work / "data"), str(work / "sft"), tiny=True),
            True,
        )
    ]


def test_sft_step_refuses_a_step_without_grad_norm_or_with_two_records(tmp_path, monkeypatch):
    _fake_training(monkeypatch, [{"loss": 2.5, "grad_norm": 0.0}])
    with pytest.raises(AssertionError, match="the step did not train"):
        gpu_check.GpuChecks(tmp_path, 0, device="cpu").sft_step()
    _fake_training(monkeypatch, [{"loss": 2.5, "grad_norm": 0.5}] * 2)
    with pytest.raises(AssertionError, match="2 steps recorded, expected 1"):
        gpu_check.GpuChecks(tmp_path, 0, device="cpu").sft_step()


def test_two_gpu_sft_step_writes_to_its_own_folder(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    ran = _fake_training(monkeypatch, [{"loss": 2.5, "grad_norm": 0.5}])
    shown = gpu_check.GpuChecks(tmp_path, 0, device="cpu").sft_step_2gpu()
    assert shown.startswith("1 FSDP2 step on 2 GPU(s): ")
    assert "output=" + str(tmp_path / "sft-2gpu") in ran[0][0] and "--nproc-per-node=2" in ran[0][0]


# -- sglang_launch and rl_step with the server process and the checksum reads stood in for --------------------


class _Server:
    """``SGLangServer``'s surface: records what it was started with."""

    made: list[_Server] = []

    def __init__(self, command, base_url, *, log_path=None, env=None):
        self.command, self.base_url, self.log_path, self.env = command, base_url, log_path, env
        self.started = self.stopped = False
        _Server.made.append(self)

    def start(self, *, timeout_s=900.0):
        self.started = True
        return self

    def stop(self):
        self.stopped = True


@pytest.fixture
def servers(monkeypatch):
    import paravt_core.engines.sglang_engine as sglang_engine

    _Server.made = []
    monkeypatch.setattr(sglang_engine, "SGLangServer", _Server)
    return _Server.made


def test_sglang_launch_needs_two_gpus(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(RuntimeError, match="^needs 2 GPUs, found 1$"):
        gpu_check.GpuChecks(tmp_path, 0).sglang_launch()


def test_sglang_launch_pins_gpu_1_and_keeps_the_launch_checksum(tmp_path, monkeypatch, servers, tiny_model):
    import torch

    import paravt_core.models as models

    loads = []

    def load(path, **kwargs):
        loads.append((path, kwargs))
        return tiny_model

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(models, "load", load)
    monkeypatch.setattr(gpu_check, "weights_checksum", lambda url: "e" * 64)
    checks = gpu_check.GpuChecks(tmp_path, 30123, device="cpu")
    shown = checks.sglang_launch()
    (server,) = servers
    assert server.started and server.base_url == "http://127.0.0.1:30123"
    assert server.env["CUDA_VISIBLE_DEVICES"] == "1" and server.log_path == str(
        tmp_path / "sglang-server.log"
    )
    at = server.command.index("--port")
    assert server.command[at + 1] == "30123"
    assert server.command[server.command.index("--model-path") + 1] == checks.model_dir
    assert shown == "weights checksum " + "e" * 16 + "; " + " ".join(server.command)
    assert loads == [(checks.model_dir, {"device": "cpu", "dtype": torch.bfloat16})]
    assert checks.launch_checksum == "e" * 64 and checks.client.base_url == "http://127.0.0.1:30123"


def test_rl_step_runs_the_plan_and_a_server_on_the_saved_final(tmp_path, monkeypatch, servers):
    from paravt_core.config import load_config
    from paravt_core.rl.config import RlConfig

    sums = iter(["a" * 64, "b" * 64, "b" * 64])
    monkeypatch.setattr(gpu_check, "weights_checksum", lambda url: next(sums))
    learner = []

    def run(command, env, check):
        learner.append((command, env, check))
        _rl_outputs(tmp_path / "rl", {"trained_sequences": 4})

    monkeypatch.setattr(gpu_check.subprocess, "run", run)
    checks = gpu_check.GpuChecks(tmp_path, 30123, device="cpu")
    assert checks.rl_step() == (
        "1 step, 4 sequences trained, server checksum aaaaaaaaaaaa -> bbbbbbbbbbbb = the saved final's"
    )
    p = gpu_check.rl_plan(
        checks.model_dir, checks.data_dir, str(tmp_path / "rl"), 30123, str(tmp_path / "p.yaml")
    )
    first, final = servers
    assert first.command == p.server_command and first.log_path == str(tmp_path / "sglang-server-rl.log")
    assert final.command == gpu_check.with_model_path(p.server_command, str(tmp_path / "rl" / "final"))
    assert final.log_path == str(tmp_path / "sglang-server-final.log")
    assert first.base_url == final.base_url == p.base_url
    assert first.env["CUDA_VISIBLE_DEVICES"] == final.env["CUDA_VISIBLE_DEVICES"] == "1"
    assert all(s.started and s.stopped for s in servers)
    ((command, env, check),) = learner
    assert check is True and env["CUDA_VISIBLE_DEVICES"] == "0"
    assert (
        command[command.index("--config") + 1] == str(tmp_path / "rl.yaml") if "--config" in command else True
    )
    assert str(tmp_path / "rl.yaml") in command
    assert load_config(RlConfig, tmp_path / "rl.yaml", []).output == str(tmp_path / "rl")


def test_help_names_the_items_as_item(capsys):
    with pytest.raises(SystemExit):
        gpu_check.main(["--help"])
    assert "[--only ITEM]" in capsys.readouterr().out


def test_main_on_a_gpu_machine_reports_the_device_and_runs_the_selected_items(tmp_path, monkeypatch, capsys):
    import torch

    made = []

    class Checks(gpu_check.GpuChecks):
        def __init__(self, work, port, **kwargs):
            super().__init__(work, port, **kwargs)
            made.append((work, port, kwargs))

        def prepare(self):
            pass

        def sft_step(self):
            return "1 step"

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "Stand-in GPU")
    monkeypatch.setattr(gpu_check, "GpuChecks", Checks)
    assert gpu_check.main(["--work", str(tmp_path), "--port", "30001", "--only", "sft_step"]) == 0
    assert made == [(tmp_path, 30001, {"tiny": False})] and type(made[0][1]) is int
    md = (tmp_path / "gpu-check.md").read_text()
    assert f"- torch: {torch.__version__}\n- gpus: 2\n- device: Stand-in GPU\n" in md
    assert "| sft_step | PASS |" in md and md.endswith("1/9 passed\n")
    assert md in capsys.readouterr().out


# -- disk_push and learner_push on the stand-in server of tests/support/gpu_check_standins.py ----------------------------


@pytest.fixture
def loads(monkeypatch):
    """``models.load`` as it is, recording each call's (uri, device, dtype)."""
    import paravt_core.models as models

    real, seen = models.load, []

    def load(uri, device="cpu", dtype=None, **kwargs):
        seen.append((uri, device, dtype))
        return real(uri, device=device, dtype=dtype, **kwargs)

    monkeypatch.setattr(models, "load", load)
    return seen


def test_disk_push_stages_under_work_and_loads_the_reference_in_the_served_dtype(
    checks_on, tiny_model_dir, tmp_path, loads
):
    checks = checks_on(tiny_model_dir)
    loads.clear()
    checks.disk_push()
    assert (tmp_path / "staging" / "v00000001").is_dir()
    assert loads == [(tiny_model_dir, "cpu", checks.local.model.dtype)]


class _Recording(LoadingSync):
    made: list[_Recording] = []

    def __init__(self, client, **kwargs):
        super().__init__(client, **kwargs)
        self.kwargs, self.versions = kwargs, []
        _Recording.made.append(self)

    def push(self, weights, version):
        self.versions.append(version)
        super().push(weights, version)


def test_learner_push_builds_its_learner_and_syncs_as_the_rl_stage_does(
    checks_on, tiny_model_dir, monkeypatch, loads
):
    import torch

    import paravt_core.rl.learner as learner_module
    import paravt_core.rl.weight_sync as weight_sync
    from paravt_core.rl.config import RlConfig

    built = {}

    class Learner(learner_module.Learner):
        def __init__(self, *args, **kwargs):
            built.update(kwargs)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(learner_module, "Learner", Learner)
    monkeypatch.setattr(weight_sync, "NcclSync", _Recording)
    _Recording.made = []
    checks = checks_on(tiny_model_dir)
    checks.disk_push()
    LoadingSync.server = checks.stand_in
    loads.clear()
    assert checks.learner_push().startswith("push 1 = the disk push's checksum; push 2: ")
    served = checks.local.model.dtype
    assert loads == [(tiny_model_dir, "cpu", torch.float32), (tiny_model_dir, "cpu", served)]
    assert built["loss"] == RlConfig().loss and built["optim"] == RlConfig().optim
    first, second = _Recording.made
    assert first.versions == [1, 2] and second.versions == [3]
    assert first.kwargs == second.kwargs | {"master_port": 29612}
    assert second.kwargs == {
        "master_address": "127.0.0.1",
        "master_port": 29613,
        "server_ranks": 1,
        "dtype": served,
    }


def test_the_request_keeps_224_px_frames_whole_under_the_agents_pixel_budget(tiny_model):
    # 224 x 224 = 50176 = MAX_PIXELS: 224 / 16-px patches = 14 x 14 patches, merged 2 x 2 -> 49 tokens per
    # frame (the tiny processor's own default budget, 16384 pixels, would shrink the frames)
    import torch

    checks = gpu_check.GpuChecks(Path("/unused"), 0, device="cpu")
    request = checks.request(tiny_model.processor)
    image_pad = tiny_model.processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert torch.equal(request.image_grid_thw, torch.tensor([[1, 14, 14]] * 4))
    assert request.input_ids.count(image_pad) == 4 * 49 and len(request.images) == 4


# 11 ---------------------------------------------------------------------------------------------------------
def test_gpu_check_refuses_a_checksum_unless_every_rank_reported_one():
    two = weights_checker_answer({"lm_head.weight": "01"}, "cd" * 32)
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
    checks_on,
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
