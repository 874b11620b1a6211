"""``make gpu-check`` (scripts/gpu_check.py) cannot run here; what can: the item runner and report, the parity
rule, and the commands it runs (their configs load, the launcher plan pins the server to GPU 1, SGLang's own
``ServerArgs`` parser accepts the server command)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from paravt_core.config import SftConfig, load_config
from paravt_core.rl.config import RlConfig
from scripts import gpu_check  # as scripts.gpu_check: the name mutmut gives its mutants
from tests.support.gpu_check_standins import LoadingSync, weights_checker_answer


def test_items_run_in_order_and_failures_skip_their_dependants(tmp_path):
    def boom():
        raise RuntimeError("server exited with code 1")

    def one_gpu():
        raise gpu_check.Skip("needs 2 GPUs, found 1")

    items = gpu_check.run_items(
        {
            "sglang_launch": boom,
            "sft_step": lambda: "1 step",
            "sft_step_2gpu": one_gpu,
            "rl_step": lambda: "ok",
        }
    )
    status = {i.name: (i.status, i.detail.splitlines()[0]) for i in items}
    assert [i.name for i in items] == gpu_check.ITEMS
    assert status == {
        "sglang_launch": ("fail", "RuntimeError: server exited with code 1"),
        "prompt_token_parity": ("skipped", "needs sglang_launch"),
        "logprob_parity": ("skipped", "needs sglang_launch"),
        "disk_push": ("skipped", "needs sglang_launch"),
        "nccl_push": ("skipped", "needs sglang_launch, disk_push"),
        "learner_push": ("skipped", "needs sglang_launch, disk_push"),
        "sft_step": ("pass", "1 step"),
        "sft_step_2gpu": ("skipped", "needs 2 GPUs, found 1"),
        "rl_step": ("pass", "ok"),
    }
    md = gpu_check.write_report(items, tmp_path, {"gpus": 2}).read_text()
    assert (
        "| sglang_launch | FAIL |" in md
        and "| sft_step | PASS |" in md
        and md.rstrip().endswith("2/9 passed")
    )
    saved = json.loads((tmp_path / "gpu-check.json").read_text())
    assert [i["status"] for i in saved["items"]] == [
        "fail",
        "skipped",
        "skipped",
        "skipped",
        "skipped",
        "skipped",
        "pass",
        "skipped",
        "pass",
    ]


def test_only_the_selected_items_run():
    """``--only sft_step`` (one GPU, no SGLang): the others are not run and say why."""
    items = gpu_check.run_items({"sft_step": lambda: "1 step"})
    assert [(i.name, i.status, i.detail) for i in items] == [
        ("sglang_launch", "skipped", "not selected"),
        ("prompt_token_parity", "skipped", "needs sglang_launch"),
        ("logprob_parity", "skipped", "needs sglang_launch"),
        ("disk_push", "skipped", "needs sglang_launch"),
        ("nccl_push", "skipped", "needs sglang_launch, disk_push"),
        ("learner_push", "skipped", "needs sglang_launch, disk_push"),
        ("sft_step", "pass", "1 step"),
        ("sft_step_2gpu", "skipped", "not selected"),
        ("rl_step", "skipped", "not selected"),
    ]
    with pytest.raises(SystemExit):
        gpu_check.main(["--only", "sft-step"])  # not an item: argparse refuses it before any work


def test_checksum_of_reads_the_engine_checksum_and_refuses_empty_answers():
    assert (
        gpu_check.checksum_of(weights_checker_answer({"lm_head.weight": "0123456789abcdef"}, "cd" * 32))
        == "cd" * 32
    )
    with pytest.raises(AssertionError, match="refused: 'Unsupported'"):
        gpu_check.checksum_of({"success": False, "message": "Unsupported"})
    with pytest.raises(AssertionError, match="no tensor checksums"):  # a server holding no weights at all
        gpu_check.checksum_of(weights_checker_answer({}, "cd" * 32))
    with pytest.raises(AssertionError, match="no per_engine_checksum"):
        gpu_check.checksum_of({**weights_checker_answer({"w": "00"}, ""), "per_engine_checksum": None})


def test_logprob_gap():
    assert gpu_check.logprob_gap([-1.0, -2.0, -3.0], [-1.05, -2.0, -2.95]) == (
        "3 tokens, max log-prob gap 0.0500, mean 0.0333"
    )
    with pytest.raises(AssertionError, match="differ by 0.500 > 0.25 at token 1"):
        gpu_check.logprob_gap([-1.0, -1.5], [-1.0, -2.0])
    with pytest.raises(AssertionError, match="1 served log-probs for 2 tokens"):
        gpu_check.logprob_gap([-1.0], [-1.0, -1.0])


def test_requests_are_what_sglang_accepts(sglang_checker, tiny_model):
    """The scoring body passes SGLang's own ``GenerateReqInput`` checks; ``/weights_checker``'s body is its
    ``CheckWeightsReqInput``."""
    checks = gpu_check.GpuChecks(Path("/unused"), 0, device="cpu")
    request = checks.request(tiny_model.processor)
    image_pad = tiny_model.processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    body = gpu_check.score_payload(request, [11, 12, 13], image_pad)
    assert body["logprob_start_len"] == 0 and body["input_ids"][-3:] == [11, 12, 13]
    assert body["input_ids"].count(image_pad) == 4 and len(body["image_data"]) == 4
    assert sglang_checker.generate_error(body) is None
    assert sglang_checker.io_struct("CheckWeightsReqInput", {"action": "checksum"})["error"] is None


def test_commands_load_and_plan(sglang_checker, tmp_path):
    sft = gpu_check.sft_command("/w/model", "/w/data", "/w/sft", python="python")
    assert sft[:5] == ["python", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1"]
    at = sft.index("--config")
    cfg = load_config(SftConfig, sft[at + 1], sft[at + 2 :])
    assert (cfg.model.uri, cfg.trainer.steps, cfg.model.bf16, cfg.model.gradient_checkpointing) == (
        "/w/model",
        1,
        True,
        True,
    )
    sft2 = gpu_check.sft_command("/w/model", "/w/data", "/w/sft", python="python", nproc=2)
    assert sft2[4] == "--nproc-per-node=2" and sft2[5:] == sft[5:]
    p = gpu_check.rl_plan("/w/model", "/w/data", "/w/rl", 30000, str(tmp_path / "rl.yaml"), python="python")
    rl_cfg = load_config(RlConfig, tmp_path / "rl.yaml", [])
    assert (rl_cfg.steps, rl_cfg.engine.weight_sync, rl_cfg.engine.gpus) == (1, "distributed", [1])
    assert p.server_env == {"CUDA_VISIBLE_DEVICES": "1"} and p.learner_env == {"CUDA_VISIBLE_DEVICES": "0"}
    assert "engine.server_ranks=1" in p.learner_command and "--nproc-per-node=1" in p.learner_command
    assert str(tmp_path / "rl.yaml") in p.learner_command
    args = sglang_checker.server_args(p.server_command[3:])
    assert args["error"] is None and args["args"]["model_path"] == "/w/model"


def test_without_a_gpu_every_item_fails_with_the_reason(tmp_path, capsys):
    assert gpu_check.main(["--work", str(tmp_path)]) == 1
    saved = json.loads((tmp_path / "gpu-check.json").read_text())
    assert {i["status"] for i in saved["items"]} == {"fail"}
    assert "no CUDA device" in capsys.readouterr().out


# -- each item against a wrong server ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def unrelated_model_dir(tmp_path_factory) -> str:
    from paravt_core.models import build_tiny_model

    return build_tiny_model(str(tmp_path_factory.mktemp("unrelated")), seed=7)


def test_logprob_parity_passes_on_the_same_weights_and_fails_on_unrelated_ones(
    checks_on, tiny_model_dir, unrelated_model_dir
):
    assert "max log-prob gap 0.0000" in checks_on(tiny_model_dir).logprob_parity()
    with pytest.raises(AssertionError, match="log-probs differ by"):
        checks_on(unrelated_model_dir).logprob_parity()


def test_logprob_parity_fails_on_a_server_that_ignores_the_images(checks_on, tiny_model_dir):
    # scored always after images A, the server agrees with us on images A (gap 0) and
    # the 0.25-nat parity alone passes; the control (images B on both sides) does not
    checks = checks_on(tiny_model_dir, sees=False)
    assert "max log-prob gap 0.0000" in checks._parity(checks.local.model)
    with pytest.raises(AssertionError, match=r"images A vs B move the continuation by 0\.0000 nats/token on"):
        checks.logprob_parity()
    shown = checks_on(tiny_model_dir).logprob_parity()
    assert "; images A vs B: " in shown and "vs gap 0.0000" in shown


def test_image_control_by_hand():
    # gap: mean |A| diffs (0.1 + 0.0) / 2 = 0.05 and B 0.0 -> 0.025; effects: served |(-1)-(-2)|, |(-2)-(-2)|
    # -> 0.5, here |(-1.1)-(-2)|, 0 -> 0.45; both > 10 x 0.025 = 0.25
    assert gpu_check.image_control([-1.0, -2.0], [-1.1, -2.0], [-2.0, -2.0], [-2.0, -2.0]) == (
        "images A vs B: 0.5000 (served) / 0.4500 (here) nats/token vs gap 0.0250"
    )
    with pytest.raises(
        AssertionError, match=r"by 0\.5000 nats/token on the server and 0\.4500 here, not more"
    ):
        gpu_check.image_control([-1.0, -2.0], [-1.1, -2.0], [-2.0, -2.0], [-2.0, -2.0], ratio=20.0)


def test_disk_push_fails_when_the_push_never_lands(checks_on, tiny_model_dir):
    landed = checks_on(tiny_model_dir).disk_push()
    assert landed.startswith("checksum changed; served vs transformers on the pushed weights: ")
    assert "max log-prob gap 0.0000" in landed
    with pytest.raises(AssertionError, match="checksum is unchanged by the disk push: it did not land"):
        checks_on(tiny_model_dir, lands=False).disk_push()


def test_nccl_push_fails_when_the_launch_weights_do_not_come_back(checks_on, tiny_model_dir, monkeypatch):
    import paravt_core.rl.weight_sync as weight_sync

    monkeypatch.setattr(weight_sync, "NcclSync", LoadingSync)
    for lands in (True, False):
        checks = checks_on(tiny_model_dir, lands=True)
        checks.disk_push()  # the server now holds perturbed weights
        LoadingSync.server = checks.stand_in
        checks.stand_in.lands = lands
        if lands:
            assert "launch checksum back; log-probs: " in checks.nccl_push()
        else:
            with pytest.raises(AssertionError, match="still the disk push's: the NCCL push did not land"):
                checks.nccl_push()


def test_learner_push_fails_when_the_tower_is_sent_again_or_the_push_does_not_land(
    checks_on, tiny_model_dir, monkeypatch
):
    import paravt_core.rl.weight_sync as weight_sync

    monkeypatch.setattr(weight_sync, "NcclSync", LoadingSync)

    def ready(**kwargs) -> gpu_check.GpuChecks:
        checks = checks_on(tiny_model_dir, **kwargs)
        checks.disk_push()  # the server holds the perturbed weights; their checksum is the disk push's
        LoadingSync.server = checks.stand_in
        return checks

    shown = ready().learner_push()
    assert shown.startswith("push 1 = the disk push's checksum; push 2: ") and shown.endswith(
        "(the tower) kept"
    )
    monkeypatch.setattr(LoadingSync, "resend_static", True)  # the tower gathered and sent by every push
    with pytest.raises(AssertionError, match=r"the second push sent 39 frozen tensors of 64"):
        ready().learner_push()
    monkeypatch.setattr(LoadingSync, "resend_static", False)
    checks = ready()
    checks.stand_in.lands = False  # the pushes answer success and change nothing
    with pytest.raises(AssertionError, match="holds the first push's weights: the second push did not land"):
        checks.learner_push()


def test_push_twice_verdict_by_hand():
    one, launch = {"lm": "1", "tower": "t1"}, {"lm": "L", "tower": "tL"}
    assert gpu_check.push_twice_verdict(one, {"lm": "L", "tower": "t1"}, launch, "x", "p", "l", "l") == (
        "push 1 = the disk push's checksum; push 2: 1 tensors sent, 1 (the tower) kept"
    )
    with pytest.raises(AssertionError, match="holds the launch weights: the tower was sent again"):
        gpu_check.push_twice_verdict(one, launch, launch, "l", "p", "l", "l")
    with pytest.raises(AssertionError, match="holds the first push's weights: the second push did not land"):
        gpu_check.push_twice_verdict(one, one, launch, "p", "p", "l", "l")
    with pytest.raises(
        AssertionError, match="a full push of the launch weights left checksum q, not the launch"
    ):
        gpu_check.push_twice_verdict(one, {"lm": "L", "tower": "t1"}, launch, "x", "p", "l", "q")
    with pytest.raises(
        AssertionError, match=r"1 tensors sent, 0 kept from the first, 1 neither \(e.g. \['tower'\]\)"
    ):
        gpu_check.push_twice_verdict(one, {"lm": "L", "tower": "??"}, launch, "x", "p", "l", "l")


def test_rl_verdict_needs_trained_sequences_and_the_learners_weights_on_the_server(tmp_path):
    def outputs(trained: float, version: int) -> Path:
        (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 0, "trained_sequences": trained}) + "\n")
        (tmp_path / "metrics.json").write_text(json.dumps({"policy_version": version}))
        return tmp_path

    a, b, c = "a" * 64, "b" * 64, "c" * 64
    assert gpu_check.rl_verdict(outputs(6.0, 1), a, b, b) == (
        "1 step, 6 sequences trained, server checksum aaaaaaaaaaaa -> bbbbbbbbbbbb = the saved final's"
    )
    with pytest.raises(AssertionError, match="trained no sequence"):
        gpu_check.rl_verdict(outputs(0.0, 1), a, b, b)
    with pytest.raises(AssertionError, match="policy_version 0"):
        gpu_check.rl_verdict(outputs(6.0, 0), a, b, b)
    with pytest.raises(AssertionError, match="unchanged after the step: the push did not land"):
        gpu_check.rl_verdict(outputs(6.0, 1), a, a, a)
    # a partial or misnamed push changes the checksum too, to what no saved final has
    with pytest.raises(
        AssertionError, match="not the saved final's cccccccccccc: the push landed other weights"
    ):
        gpu_check.rl_verdict(outputs(6.0, 1), a, b, c)


def test_the_final_server_is_the_plans_command_on_the_saved_final(sglang_checker, tmp_path):
    p = gpu_check.rl_plan("/w/model", "/w/data", "/w/rl", 30000, str(tmp_path / "rl.yaml"), python="python")
    command = gpu_check.with_model_path(p.server_command, "/w/rl/final")
    assert len(command) == len(p.server_command) and command.count("/w/rl/final") == 1
    args = sglang_checker.server_args(command[3:])
    assert args["error"] is None and args["args"]["model_path"] == "/w/rl/final"


def test_two_gpu_sft_step_is_skipped_with_the_reason_on_fewer_gpus(tmp_path):
    items = gpu_check.run_items({"sft_step_2gpu": gpu_check.GpuChecks(tmp_path, 0).sft_step_2gpu})
    assert [(i.status, i.detail) for i in items if i.name == "sft_step_2gpu"] == [
        ("skipped", "needs 2 GPUs, found 0")
    ]


def test_sft_step_starts_from_an_empty_output(tmp_path, monkeypatch):
    # a rerun must not pass on the metrics a finished earlier run left behind. Fault
    # injected: the training command does nothing, so only a stale output could make the item pass.
    stale = tmp_path / "sft"
    stale.mkdir()
    (stale / "metrics.jsonl").write_text('{"loss": 1.0, "grad_norm": 1.0, "tokens": 10}\n')
    ran = []
    monkeypatch.setattr(gpu_check.subprocess, "run", lambda command, check: ran.append(command))
    checks = gpu_check.GpuChecks(tmp_path, 0, device="cpu")
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        checks.sft_step()
    assert len(ran) == 1 and not stale.exists()
