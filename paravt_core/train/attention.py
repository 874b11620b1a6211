"""``model.attn_implementation: packed_sdpa``: attention that computes each packed sample's own causal block only.

With ``sdpa`` a pack of samples attends through one dense [L, L] mask that is block-diagonal (transformers
builds it from where the text positions restart): the kernel still computes every score, including all the
blocks between different samples. Here the language model's attention runs once per sample on its own
slice (causal sdpa, ``enable_gqa``), so its cost is the sum of the samples' squares instead of the pack's
square, and no [L, L] mask is built. The samples' lengths come from the host (``PackedBatch.lengths``, passed
down as the forward's ``packed_lengths`` keyword), so nothing is read back from the device.

transformers (5.x) has no flex_attention for Qwen3-VL (``_supports_flex_attn`` is off) and its own varlen
path needs flash-attn; its ``AttentionInterface`` / ``AttentionMaskInterface`` registries take a function by
name, which is what :func:`register` does. The vision tower (no ``packed_lengths``) keeps sdpa.

``model.sdpa_backend`` picks the SDPA kernel of packed_sdpa's calls on purpose. torch 2.11
and later, on sm90 / sm100 with a bundled cuDNN > 9.15, put cuDNN's fused attention first
(``check_prefer_cudnn_attention``, ``sdp_utils.cpp``); cuDNN builds and caches an execution plan per new
(sample length, strides) key, in forward, recompute and backward alike, and packed_sdpa makes a new length
per sample. ``flash`` (the default, until a GPU run measures the others) enables flash, then efficient, then
math: whichever first takes the call runs (bf16 on a GPU: flash; fp32 on a GPU: efficient; CPU: flash's CPU
kernel), and cuDNN never. Each choice enables its kernel and the fallbacks torch itself ranks after it (flash
> efficient > math in both of torch's orders), so the outcome does not hang on the one-time priority
rewrite torch does at its first CUDA dispatch; ``set_priority=True`` matters only for ``cudnn``, which torch
ranks last off sm90 / sm100. ``auto`` is torch's own dispatch (no context).

Scope: the backend applies to packed_sdpa's calls only (the per-sample attention of the language model,
and its recompute; a backward runs the kernel its forward chose). The vision tower and
``attn_implementation: sdpa`` keep torch's dispatch: the lending's ``sdpa`` profile stays torch's default.
The choice is one process-wide registration (like torch's own SDPA flags): policy and reference share it.

``torch.nn.attention.varlen.varlen_attn`` (one call per layer instead of one per sample) is not offered: it
runs on CUDA only (flash or cuDNN kernels; on CPU nothing to prove it against sdpa with), and its signature
moved between releases: 2.10 takes ``is_causal``, later ones ``window_size``, and ``enable_gqa`` is first in
2.12's docs, so on the GPU image's 2.11 GQA is not assured: repeating Qwen3-VL-8B's 8 KV heads to 32 would
cost 4x the K/V memory per layer. And 2.14.1 sends a call without GQA whose longest sample has > 128 tokens
to cuDNN on sm90 / sm100 (cuDNN >= 9.18, ``_can_use_cudnn`` in varlen.py): the plan per length again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from paravt_core.config import DEFAULT_SDPA_BACKEND, SdpaBackend

NAME = "packed_sdpa"
T = TypeVar("T")

# Each choice: its kernel, then the ones torch ranks after it; cuDNN only when named. None: torch's dispatch.
KERNELS: dict[str, tuple[SDPBackend, ...] | None] = {
    "auto": None,
    "flash": (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH),
    "efficient": (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH),
    "math": (SDPBackend.MATH,),
    "cudnn": (
        SDPBackend.CUDNN_ATTENTION,
        SDPBackend.FLASH_ATTENTION,
        SDPBackend.EFFICIENT_ATTENTION,
        SDPBackend.MATH,
    ),
}
# What the CPU build has (sdp_utils_cpp.cpp: flash's CPU kernel, then math, whatever the priority order)
CPU_KERNELS = (SDPBackend.FLASH_ATTENTION, SDPBackend.MATH)
WORDS = {
    SDPBackend.FLASH_ATTENTION: "flash",
    SDPBackend.EFFICIENT_ATTENTION: "efficient",
    SDPBackend.MATH: "math",
    SDPBackend.CUDNN_ATTENTION: "cuDNN",
}


def kernels(backend: str) -> tuple[SDPBackend, ...] | None:
    """The SDPA kernels ``backend`` enables, in the order tried; None: torch's own dispatch."""
    if backend not in KERNELS:
        raise ValueError(f"sdpa backend {backend!r}: one of {', '.join(KERNELS)}")
    return KERNELS[backend]


def cpu_kernels(backend: str) -> tuple[SDPBackend, ...]:
    """The kernels a CPU call under ``backend`` can get, in the CPU build's fixed order."""
    enabled = kernels(backend) or CPU_KERNELS
    return tuple(k for k in CPU_KERNELS if k in enabled)


def _under(backend: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` with ``backend``'s kernels enabled (torch's flags restored after)."""
    order = kernels(backend)
    if order is None:  # auto: torch's dispatch, flags untouched
        return fn(*args, **kwargs)
    # torch's own context, not a generator of ours: dynamo traces it (SDPAKernelVariable, set_priority
    # included), so a compiled layer keeps the choice; sdpa_kernel takes a list, not a tuple
    with sdpa_kernel(list(order), set_priority=True):
        return fn(*args, **kwargs)


def packed_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    packed_lengths: tuple[int, ...] | list[int] | None = None,
    sdpa_backend: SdpaBackend = DEFAULT_SDPA_BACKEND,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """[B=1, heads, L, D] inputs -> ([1, L, heads, D], None), causal within each of ``packed_lengths``;
    every SDPA call under ``sdpa_backend``'s kernels (:data:`KERNELS`)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if packed_lengths is None:  # a call outside a packed forward (no lengths given): plain sdpa, causal
        return _under(
            sdpa_backend,
            sdpa_attention_forward,
            module,
            query,
            key,
            value,
            attention_mask,
            scaling=scaling,
            dropout=dropout,
            **kwargs,
        )
    if query.shape[0] != 1 or query.shape[2] != sum(packed_lengths):
        raise ValueError(
            f"packed_lengths {list(packed_lengths)} do not cover the query's {query.shape[2]} tokens"
        )
    # one kernel context per layer call, not one per sample
    out = _under(sdpa_backend, _per_sample, query, key, value, list(packed_lengths), scaling, dropout)
    return out.transpose(1, 2).contiguous(), None


def _per_sample(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    lengths: list[int],
    scaling: float | None,
    dropout: float,
) -> torch.Tensor:
    """Causal sdpa on each sample's own slice, concatenated back: [1, heads, L, D]."""
    gqa = query.shape[1] != key.shape[1]
    # torch.split, not slicing: a slice's backward scatters into a zero tensor of the whole input per slice
    outs = [
        torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=dropout, scale=scaling, enable_gqa=gqa
        )
        for q, k, v in zip(
            query.split(lengths, dim=2), key.split(lengths, dim=2), value.split(lengths, dim=2), strict=True
        )
    ]
    return torch.cat(outs, dim=2)


def _no_mask(*args: Any, **kwargs: Any) -> None:
    return None  # packed_attention masks by construction (causal per sample)


def register(sdpa_backend: SdpaBackend = DEFAULT_SDPA_BACKEND) -> None:
    """Make ``attn_implementation="packed_sdpa"`` known to transformers, its calls under ``sdpa_backend``
    (idempotent; the last registration holds for every model of the process)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    kernels(sdpa_backend)  # an unknown name fails here, not at the first forward
    AttentionInterface.register(NAME, functools.partial(packed_attention, sdpa_backend=sdpa_backend))
    AttentionMaskInterface.register(NAME, _no_mask)


def forward_kwargs(model: Any, lengths: list[int]) -> dict[str, Any]:
    """What the language model's forward needs for ``packed_sdpa`` (nothing for the other implementations)."""
    config = getattr(model, "config", None)
    text = getattr(config, "text_config", config)
    return {"packed_lengths": tuple(lengths)} if getattr(text, "_attn_implementation", None) == NAME else {}


def set_implementation(model: Any, name: str, sdpa_backend: SdpaBackend = DEFAULT_SDPA_BACKEND) -> None:
    """``name`` for the language model of a Qwen3-VL ``model``; with ``packed_sdpa`` the vision tower runs sdpa
    and the language model's SDPA calls run under ``sdpa_backend`` (ignored by the other implementations)."""
    if name == NAME:
        register(sdpa_backend)
        model.set_attn_implementation({"text_config": NAME, "vision_config": "sdpa", "": "sdpa"})
    elif name != model.config._attn_implementation:
        model.set_attn_implementation(name)


def describe(name: str, sdpa_backend: str, device_type: str) -> str:
    """The start line: the attention and which SDPA kernels its calls try on ``device_type`` (host facts only,
    no device read); a kernel the device lacks is named as missing, not silently swapped."""
    if name != NAME:
        return f"attention: {name} (torch's SDPA dispatch; the sdpa backend applies to {NAME} only)"
    head = f"attention: {NAME}, sdpa backend {sdpa_backend}"
    order = kernels(sdpa_backend)
    if device_type == "cpu":
        runs = ", then ".join(WORDS[k] for k in cpu_kernels(sdpa_backend))
        lacks = f"; {WORDS[order[0]]} has no CPU kernel" if order and order[0] not in CPU_KERNELS else ""
        mode = "torch's dispatch; " if order is None else ""
        return f"{head} ({mode}on CPU: {runs}{lacks})"
    if order is None:
        return f"{head} (torch's dispatch: cuDNN first on sm90/sm100 with cuDNN > 9.15)"
    rest = [WORDS[k] for k in order[1:]]
    off = [WORDS[k] for k in WORDS if k not in order]
    then = f"then {', '.join(rest)}" if rest else "only"
    return f"{head} ({then}{'; ' + ', '.join(off) + ' off' if off else ''})"
