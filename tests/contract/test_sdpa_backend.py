"""``model.sdpa_backend``: the SDPA kernel of packed_sdpa's calls, chosen on purpose.

On CPU in float64 every value equals the dense masked ``sdpa`` path (logits and gradients) on a pack of three
samples with images. The kernel a value names is the one that runs (torch's profiler: op names), in the
forward and in the checkpointed recompute, eager and with ``train.compile_layers``; torch's own flags are
back as they were after each call (the vision tower keeps torch's dispatch). A kernel the CPU lacks
(efficient, cuDNN) is said in the start line, not swapped in silence."""

from __future__ import annotations

import typing

import pytest
import torch

from paravt_core.config import ConfigError, SdpaBackend, SftConfig, load_config
from paravt_core.models import load
from paravt_core.rl.config import RlConfig
from paravt_core.sft.inputs import encode_row
from paravt_core.sft.packing import pack, target_logits, token_losses
from paravt_core.train.attention import NAME, describe, kernels, set_implementation
from paravt_core.train.fsdp import CoreOptions, decoder_layers, prepare
from tests.support.sft_support import CALL_1, fp64_three_samples, multi_call_row, text

BACKENDS = typing.get_args(SdpaBackend)
FLASH_OP = "aten::_scaled_dot_product_flash_attention_for_cpu"
MATH_OP = "aten::_scaled_dot_product_attention_math"
# The CPU build tries flash's CPU kernel, then math (sdp_utils_cpp.cpp): the kernel each value gets here
CPU_OP = {"auto": FLASH_OP, "flash": FLASH_OP, "cudnn": FLASH_OP, "efficient": MATH_OP, "math": MATH_OP}


def test_every_value_is_mapped_and_the_default_is_flash() -> None:
    assert set(BACKENDS) == set(CPU_OP) == {"flash", "auto", "cudnn", "efficient", "math"}
    assert SftConfig().model.sdpa_backend == "flash" and RlConfig().sdpa_backend == "flash"
    assert load_config(SftConfig, None, ["model.sdpa_backend=auto"]).model.sdpa_backend == "auto"
    assert load_config(RlConfig, None, ["sdpa_backend=math"]).sdpa_backend == "math"
    with pytest.raises(ConfigError, match="flash"):
        load_config(SftConfig, None, ["model.sdpa_backend=fast"])
    with pytest.raises(ValueError, match="one of auto, flash"):
        kernels("fast")  # the attention module refuses too (a caller that skipped the config)


def test_the_start_line_names_the_kernels_and_what_the_device_lacks() -> None:
    gpu = {b: describe(NAME, b, "cuda") for b in BACKENDS}
    assert gpu["flash"] == "attention: packed_sdpa, sdpa backend flash (then efficient, math; cuDNN off)"
    assert gpu["efficient"] == "attention: packed_sdpa, sdpa backend efficient (then math; flash, cuDNN off)"
    assert gpu["math"] == "attention: packed_sdpa, sdpa backend math (only; flash, efficient, cuDNN off)"
    assert gpu["cudnn"] == "attention: packed_sdpa, sdpa backend cudnn (then flash, efficient, math)"
    assert "torch's dispatch: cuDNN first on sm90/sm100" in gpu["auto"]
    cpu = {b: describe(NAME, b, "cpu") for b in BACKENDS}
    assert cpu["efficient"].endswith("(on CPU: math; efficient has no CPU kernel)")
    assert cpu["cudnn"].endswith("(on CPU: flash, then math; cuDNN has no CPU kernel)")
    for backend, line in cpu.items():  # the line's first CPU kernel is the one the profile below sees
        first = "flash" if CPU_OP[backend] == FLASH_OP else "math"
        assert f"on CPU: {first}" in line, line
        assert ("has no CPU kernel" in line) == (backend in ("efficient", "cudnn")), line
    assert describe("sdpa", "flash", "cuda") == (
        "attention: sdpa (torch's SDPA dispatch; the sdpa backend applies to packed_sdpa only)"
    )


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _run(model, batch) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    with torch.no_grad():
        _, logits = target_logits(model, batch, **batch.model_inputs())
    loss = token_losses(model, batch)
    loss.backward()
    return logits, loss.detach(), _grads(model)


def _flags() -> tuple[bool, ...]:
    b = torch.backends.cuda
    return (b.flash_sdp_enabled(), b.mem_efficient_sdp_enabled(), b.math_sdp_enabled(), b.cudnn_sdp_enabled())


@pytest.fixture(scope="module")
def fp64_pack(tiny_model_dir: str, image_64: str):
    """(the tiny model in float64, a pack of three samples with two images, the masked sdpa path's outputs)."""
    model, batch = fp64_three_samples(tiny_model_dir, image_64)
    set_implementation(model, "sdpa")
    return model, batch, _run(model, batch)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_equals_the_masked_sdpa_path_in_float64(fp64_pack, backend: str) -> None:
    model, batch, (logits0, loss0, grads0) = fp64_pack
    before = _flags()
    set_implementation(model, NAME, backend)
    logits, loss, grads = _run(model, batch)
    assert _flags() == before  # the context restored torch's flags: the vision tower saw torch's dispatch
    torch.testing.assert_close(logits, logits0, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(loss, loss0, rtol=1e-12, atol=0)
    assert grads.keys() == grads0.keys() and any("language_model" in n for n in grads)
    for name, grad in grads0.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-9, atol=1e-12, msg=name)


def _text_pack(loaded):
    """Two text-only samples (no vision tower, whose sdpa calls keep torch's dispatch and would blur counts)."""
    short = [{"role": "user", "content": [text("Crop?")]}, {"role": "assistant", "content": [text(CALL_1)]}]
    rows = [multi_call_row(), short]
    return pack([encode_row(r, loaded.processor, loaded.config, index=i) for i, r in enumerate(rows)])


def _ops(model, batch) -> tuple[torch.Tensor, dict[str, int]]:
    """(the loss, how often each SDPA op ran in its forward and backward)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        loss = token_losses(model, batch)
        loss.backward()
    counts = {e.key: e.count for e in prof.key_averages() if "attention" in e.key}
    return loss.detach(), counts


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_named_kernel_runs_in_the_forward_and_the_recompute(tiny_model_dir: str, backend: str) -> None:
    loaded = load(tiny_model_dir)
    model = loaded.model
    set_implementation(model, NAME, backend)
    prepare(model, CoreOptions(activation_checkpointing=True), trainable=True)
    batch = _text_pack(loaded)
    _, counts = _ops(model, batch)
    calls = len(decoder_layers(model)) * len(batch.lengths)  # one SDPA call per sample per layer
    other = MATH_OP if CPU_OP[backend] == FLASH_OP else FLASH_OP
    # forward + the checkpointed recompute in the backward, both under the choice; none of the other kernel
    assert counts.get(CPU_OP[backend], 0) == 2 * calls, counts
    assert counts.get(other, 0) == 0, counts
    if CPU_OP[backend] == FLASH_OP:
        assert counts.get(FLASH_OP + "_backward", 0) == calls, counts


@pytest.mark.parametrize("backend", ["flash", "math"])
def test_compiled_layers_keep_the_named_kernel(tiny_model_dir: str, backend: str) -> None:
    # train.compile_layers: dynamo traces torch's sdpa_kernel context, so the choice is baked into the graph
    loaded = load(tiny_model_dir)
    batch = _text_pack(loaded)
    out = {}
    for compiled in (False, True):
        torch._dynamo.reset()
        model = load(tiny_model_dir).model
        set_implementation(model, NAME, backend)
        prepare(model, CoreOptions(activation_checkpointing=True, compile_layers=compiled), trainable=True)
        out[compiled] = (*_ops(model, batch), _grads(model))
        assert all((layer._compiled_call_impl is not None) == compiled for layer in decoder_layers(model))
    (eager, eager_ops, eager_grads), (loss, ops, grads) = out[False], out[True]
    torch.testing.assert_close(loss, eager, rtol=1e-5, atol=1e-5)
    for name, grad in eager_grads.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-5, atol=1e-5, msg=name)
    assert eager_ops.get(CPU_OP[backend], 0) > 0, eager_ops
    if backend == "flash":  # inductor calls flash's CPU kernel as it is
        assert ops.get(FLASH_OP, 0) > 0, ops
    else:  # math is lowered to matmuls and a softmax: no flash kernel anywhere in the compiled step
        assert ops.get(FLASH_OP, 0) == 0 and ops.get(FLASH_OP + "_backward", 0) == 0, ops


def test_the_rl_learner_registers_and_says_its_backend(tiny_model_dir: str, capsys) -> None:
    from transformers import AttentionInterface

    from paravt_core.rl.stage import _learner
    from paravt_core.train.dist import Dist

    cfg = load_config(RlConfig, None, [f"model={tiny_model_dir}", "sdpa_backend=math"])
    learner, _ = _learner(cfg, Dist(), torch.float32, tiny_model_dir)
    assert AttentionInterface()[NAME].keywords == {"sdpa_backend": "math"}  # policy and reference alike
    assert learner.attention == describe(NAME, "math", "cpu")
    assert f"rl: {describe(NAME, 'math', 'cpu')}" in capsys.readouterr().err
