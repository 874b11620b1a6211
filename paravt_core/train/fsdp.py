"""Model preparation shared by SFT and RL: load, freeze, checkpoint activations, shard, optimize.

Order (torchtitan's): freeze -> activation checkpointing -> ``fully_shard`` per block, then the root ->
materialize and load the weights into the shards -> optimizer over the trainable parameters.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from .dist import Dist

_CKPT_PREFIX = "_checkpoint_wrapped_module."


@dataclass(frozen=True)
class CoreOptions:
    """What both trainers decide the same way (from ``train:`` in their configs)."""

    freeze_vision: bool = True  # the vision tower (blocks, patch embedding, mergers) is not trained
    mixed_precision: bool = False  # FSDP2: bf16 params in compute, float32 masters and reductions
    activation_checkpointing: bool = True  # recompute each decoder layer's activations in the backward
    compile_layers: bool = False  # torch.compile each decoder layer in place (state-dict keys unchanged)


def decoder_layers(model: Any) -> torch.nn.ModuleList:
    return model.model.language_model.layers


def vision_blocks(model: Any) -> torch.nn.ModuleList:
    return model.model.visual.blocks


def freeze(model: Any, opts: CoreOptions) -> list[str]:
    """The frozen-module rule: with ``freeze_vision`` every parameter of ``model.model.visual`` (patch
    embedding, position embedding, blocks, merger and deepstack mergers) stops requiring grad — the
    published model trained the language model only. Returns the frozen parameter names."""
    frozen = []
    if opts.freeze_vision:
        for name, p in model.model.visual.named_parameters():
            p.requires_grad_(False)
            frozen.append(f"model.visual.{name}")
    return frozen


def checkpoint_layers(model: Any) -> None:
    """Activation checkpointing with torch's own wrapper on every decoder layer (and every vision block when
    the tower is trained). Unlike ``gradient_checkpointing_enable`` of transformers it does not depend on
    ``module.training``: an ``eval()`` model (no dropout) still recomputes in the backward. State-dict keys are
    unchanged (the wrapper strips its prefix)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper

    lists = [decoder_layers(model)]
    if any(p.requires_grad for p in model.model.visual.parameters()):
        lists.append(vision_blocks(model))
    for layers in lists:
        for i, layer in enumerate(layers):
            layers[i] = checkpoint_wrapper(layer, checkpoint_impl=CheckpointImpl.NO_REENTRANT)


def shard(root: torch.nn.Module, inner: Any, d: Dist, mixed_precision: bool) -> None:
    """FSDP2: each decoder layer and vision block is its own unit, the vision tower (when frozen) one more, the
    root holds the rest. ``mixed_precision``: params all-gathered in bf16 for compute, gradients reduced in
    float32 into float32 master shards (the optimizer only ever sees float32)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(d.device.type, (d.world,))
    kwargs: dict[str, Any] = {"mesh": mesh}
    if mixed_precision:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layers in (vision_blocks(inner), decoder_layers(inner)):
        for layer in layers:
            fully_shard(layer, **kwargs)
    fully_shard(root, **kwargs)


def _clean(name: str) -> str:
    return name.replace(_CKPT_PREFIX, "")


def load_into(root: torch.nn.Module, full: dict[str, torch.Tensor] | None, buffers: dict, d: Dist) -> None:
    """Fill the sharded ``root`` (materialized with ``to_empty``) from rank 0's full state dict: each tensor
    is broadcast once and every rank keeps its slice (copied into the existing float32 shards: a bf16
    checkpoint becomes float32 masters). Non-persistent buffers (rotary ``inv_freq``) are not in any state
    dict: rank 0's values are broadcast the same way."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(
        root,
        full if d.rank == 0 else {},
        options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, strict=True),
    )
    for name, buf in root.named_buffers():
        src = buffers[_clean(name)].to(buf.device, buf.dtype) if d.rank == 0 else buf
        if d.rank == 0:
            buf.copy_(src)
        dist.broadcast(buf, src=0)


def build(
    uri: str,
    d: Dist,
    wrap: Callable[[Any], torch.nn.Module],
    opts: CoreOptions,
    *,
    dtype: torch.dtype = torch.float32,
    trainable: bool = True,
) -> tuple[torch.nn.Module, Any]:
    """(the root module ``wrap(model)`` ready to train or score, the ``Loaded`` of rank 0 / metadata of others).

    One process: the checkpoint loaded in ``dtype`` on the device. Under torchrun: every rank builds the
    model on the meta device (no weights in host memory), shards it, allocates its shards on its device in
    ``dtype`` and receives them from rank 0, which alone reads the checkpoint (once, in its stored dtype).
    Host memory per node: one checkpoint-dtype copy on rank 0, nothing on the others — never a float32 copy
    per rank. ``trainable=False`` (the frozen reference): every parameter frozen, no checkpointing."""
    from transformers import AutoModelForImageTextToText

    from paravt_core.models import Loaded, load, load_processor_only

    purpose = "trained model" if trainable else "frozen reference"
    if not d.sharded:
        loaded = load(uri, device=str(d.device), dtype=dtype, purpose=purpose)
        return assemble(loaded.model, d, wrap, opts, trainable), loaded
    if d.rank == 0:
        loaded = load(uri, device="cpu", dtype=None, purpose=f"{purpose} (rank 0 reads, then broadcasts)")
    else:
        loaded = load_processor_only(uri)
    with torch.device("meta"):  # a copy: from_config writes its dtype into the config it is given
        model = AutoModelForImageTextToText.from_config(copy.deepcopy(loaded.config), dtype=dtype)
    root = assemble(model, d, wrap, opts, trainable)
    root.to_empty(device=d.device)
    prefix = _root_prefix(root, model)
    full = buffers = None
    if d.rank == 0:
        full = {prefix + k: v for k, v in loaded.model.state_dict().items()}
        buffers = {prefix + k: v for k, v in loaded.model.named_buffers()}
    load_into(root, full, buffers or {}, d)
    if d.rank == 0:  # the host copy is no longer needed: the processor and config stay
        loaded = Loaded(None, loaded.processor, loaded.tokenizer, loaded.config, loaded.path)
    root.eval()
    return root, loaded


def assemble(
    model: Any, d: Dist, wrap: Callable[[Any], torch.nn.Module], opts: CoreOptions, trainable: bool = True
) -> torch.nn.Module:
    """freeze + checkpointing (``prepare``), ``wrap`` into the root, and under torchrun FSDP2 (mixed precision
    only for a trainable model). What ``build`` does to a model before its weights arrive, and what
    ``paravt plan`` runs on fake tensors."""
    prepare(model, opts, trainable)
    root = wrap(model)
    if d.sharded:
        shard(root, model, d, opts.mixed_precision and trainable)
    return root


def _root_prefix(root: torch.nn.Module, inner: torch.nn.Module) -> str:
    for name, module in root.named_children():
        if module is inner:
            return name + "."
    return ""


def prepare(model: Any, opts: CoreOptions, trainable: bool) -> None:
    model.config.use_cache = False
    if not trainable:
        for p in model.parameters():
            p.requires_grad_(False)
        return
    freeze(model, opts)
    if opts.activation_checkpointing:
        checkpoint_layers(model)
    if opts.compile_layers:  # after checkpointing, before sharding (torchtitan's order); Module.compile
        for layer in decoder_layers(model):  # keeps the module and its keys, unlike torch.compile(module)
            layer.compile()


def param_groups(root: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups over the trainable parameters: decay on matrices, none on norms and biases (1-D)."""
    decay, no_decay = [], []
    for p in root.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_adamw(
    root: torch.nn.Module, lr: float, weight_decay: float, betas: tuple[float, float], eps: float = 1e-8
) -> torch.optim.AdamW:
    return torch.optim.AdamW(param_groups(root, weight_decay), lr=lr, betas=tuple(betas), eps=eps)


def trainable(root: torch.nn.Module) -> Iterator[torch.nn.Parameter]:
    return (p for p in root.parameters() if p.requires_grad)


def grad_norm_and_clip(root: torch.nn.Module, max_norm: float) -> float:
    """Global gradient norm over the trainable parameters (all shards) before clipping to ``max_norm``."""
    return float(clip_grads(root, max_norm))


def clip_grads(root: torch.nn.Module, max_norm: float) -> torch.Tensor:
    """:func:`grad_norm_and_clip` without reading the norm back: a 0-d tensor on the device (no sync)."""
    norm = torch.nn.utils.clip_grad_norm_(list(trainable(root)), max_norm)
    full = getattr(norm, "full_tensor", None)  # FSDP2: a DTensor
    return full() if full is not None else norm
