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
"""

from __future__ import annotations

from typing import Any

import torch

NAME = "packed_sdpa"


def packed_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    packed_lengths: tuple[int, ...] | list[int] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """[B=1, heads, L, D] inputs -> ([1, L, heads, D], None), causal within each of ``packed_lengths``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if packed_lengths is None:  # a call outside a packed forward (no lengths given): plain sdpa, causal
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    if query.shape[0] != 1 or query.shape[2] != sum(packed_lengths):
        raise ValueError(
            f"packed_lengths {list(packed_lengths)} do not cover the query's {query.shape[2]} tokens"
        )
    gqa = query.shape[1] != key.shape[1]
    # torch.split, not slicing: a slice's backward scatters into a zero tensor of the whole input per slice
    lengths = list(packed_lengths)
    outs = [
        torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=dropout, scale=scaling, enable_gqa=gqa
        )
        for q, k, v in zip(
            query.split(lengths, dim=2), key.split(lengths, dim=2), value.split(lengths, dim=2), strict=True
        )
    ]
    return torch.cat(outs, dim=2).transpose(1, 2).contiguous(), None


def _no_mask(*args: Any, **kwargs: Any) -> None:
    return None  # packed_attention masks by construction (causal per sample)


def register() -> None:
    """Make ``attn_implementation="packed_sdpa"`` known to transformers (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, packed_attention)
    AttentionMaskInterface.register(NAME, _no_mask)


def forward_kwargs(model: Any, lengths: list[int]) -> dict[str, Any]:
    """What the language model's forward needs for ``packed_sdpa`` (nothing for the other implementations)."""
    config = getattr(model, "config", None)
    text = getattr(config, "text_config", config)
    return {"packed_lengths": tuple(lengths)} if getattr(text, "_attn_implementation", None) == NAME else {}


def set_implementation(model: Any, name: str) -> None:
    """``name`` for the language model of a Qwen3-VL ``model``; with ``packed_sdpa`` the vision tower runs sdpa."""
    if name == NAME:
        register()
        model.set_attn_implementation({"text_config": NAME, "vision_config": "sdpa", "": "sdpa"})
    elif name != model.config._attn_implementation:
        model.set_attn_implementation(name)
