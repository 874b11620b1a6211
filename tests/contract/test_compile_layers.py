"""``train.compile_layers``: each decoder layer compiled in place gives the eager
loss and gradients (1e-5) and keeps the state-dict keys (checkpoints load either way)."""

from __future__ import annotations

import torch

from paravt_core.models import load
from paravt_core.sft.inputs import encode_row
from paravt_core.sft.packing import pack, token_losses
from paravt_core.train.fsdp import CoreOptions, decoder_layers, prepare
from tests.support.sft_support import image_row, multi_call_row


def _loss_and_grads(model_dir: str, batch, compile_layers: bool):
    model = load(model_dir).model
    prepare(model, CoreOptions(activation_checkpointing=True, compile_layers=compile_layers), trainable=True)
    loss = token_losses(model, batch)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return model, loss.detach(), grads


def test_compiled_layers_equal_eager(tiny_model_dir: str, image_64: str) -> None:
    loaded = load(tiny_model_dir)
    rows = [image_row(image_64), multi_call_row()]
    batch = pack([encode_row(r, loaded.processor, loaded.config, index=i) for i, r in enumerate(rows)])
    torch._dynamo.reset()
    eager_model, eager, eager_grads = _loss_and_grads(tiny_model_dir, batch, False)
    model, compiled, grads = _loss_and_grads(tiny_model_dir, batch, True)
    assert all(layer._compiled_call_impl is not None for layer in decoder_layers(model))
    assert model.state_dict().keys() == eager_model.state_dict().keys()
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)
    assert grads.keys() == eager_grads.keys()
    for name, grad in eager_grads.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-5, atol=1e-5, msg=name)
