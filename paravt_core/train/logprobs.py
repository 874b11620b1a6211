"""Target log-probs of the language-model head in chunks over positions.

At 8B a forward pass of 8,192 trained positions would hold 8,192 x 151,936 float32 logits (~5 GB) plus
their bf16 copy and the log-softmax's output for the backward. Here ``lm_head`` runs on ``chunk`` positions
at a time under activation checkpointing: the forward keeps only the [chunk, vocab] block being reduced,
and the backward recomputes one chunk's logits at a time. The math is ``log_softmax(logits / T)[target]``
in float32 (at least), identical to the unchunked form up to summation order.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint


def _chunk_logprobs(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float
) -> torch.Tensor:
    logits = torch.nn.functional.linear(hidden, weight)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature
    picked = logits.gather(-1, targets[:, None]).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def target_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk: int = 1024,
) -> torch.Tensor:
    """log p(targets[k] | hidden[k]) at ``temperature`` for every row of ``hidden`` [K, H] (``weight``: the
    head's [vocab, H]); [K] in at least float32. Rows are processed ``chunk`` at a time."""
    if hidden.shape[0] == 0:
        return torch.zeros(0, dtype=torch.promote_types(hidden.dtype, torch.float32), device=hidden.device)
    parts = []
    grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    for lo in range(0, hidden.shape[0], chunk):
        h, t = hidden[lo : lo + chunk], targets[lo : lo + chunk]
        if grad:
            parts.append(checkpoint(_chunk_logprobs, h, weight, t, temperature, use_reentrant=False))
        else:
            parts.append(_chunk_logprobs(h, weight, t, temperature))
    return torch.cat(parts)
