"""``model.attn_implementation: packed_sdpa``: each packed sample attends within its own
causal block only. Equal logits and gradients to the dense masked sdpa path (float64) on a pack of three
samples with images; the attention FLOPs saved per pack on the synthetic data's real lengths, counted by
``torch.utils.flop_counter``."""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode

from paravt_core.config import SftConfig, load_config
from paravt_core.models import load
from paravt_core.sft.data import Dropped, SftRows, read_rows, sft_files
from paravt_core.sft.inputs import MediaSpec
from paravt_core.sft.packing import Packer, target_logits, token_losses
from paravt_core.train.attention import packed_attention, set_implementation
from tests.support.sft_support import fp64_three_samples


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def test_packed_sdpa_equals_the_masked_sdpa_path(tiny_model_dir: str, image_64: str) -> None:
    model, batch = fp64_three_samples(tiny_model_dir, image_64)

    out = {}
    for name in ("sdpa", "packed_sdpa"):
        set_implementation(model, name)
        assert model.config.text_config._attn_implementation == name
        assert model.config.vision_config._attn_implementation == "sdpa"
        model.zero_grad()
        with torch.no_grad():
            keep, logits = target_logits(model, batch, **batch.model_inputs())
        loss = token_losses(model, batch)
        loss.backward()
        out[name] = (keep, logits, loss.detach(), _grads(model))
    (k0, l0, loss0, g0), (k1, l1, loss1, g1) = out["sdpa"], out["packed_sdpa"]
    assert torch.equal(k0, k1)
    torch.testing.assert_close(l1, l0, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(loss1, loss0, rtol=1e-12, atol=0)
    assert g0.keys() == g1.keys() and any("language_model" in n for n in g0)
    for name, grad in g0.items():
        torch.testing.assert_close(g1[name], grad, rtol=1e-9, atol=1e-12, msg=name)


class _Attn(torch.nn.Module):  # what transformers' sdpa path reads from the attention module
    is_causal = True
    num_key_value_groups = 2


def _attention_flops(
    lengths: list[int], heads: int = 16, kv_heads: int = 8, dim: int = 128
) -> tuple[int, int]:
    """(FLOPs of one layer's attention over a pack: dense masked sdpa, packed_sdpa), on meta tensors."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    total = sum(lengths)
    q = torch.empty(1, heads, total, dim, device="meta")
    k = v = torch.empty(1, kv_heads, total, dim, device="meta")
    doc = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    mask = ((doc[:, None] == doc[None, :]) & torch.ones(total, total, dtype=torch.bool).tril())[None, None]
    counts = []
    for call in (
        lambda: sdpa_attention_forward(_Attn(), q, k, v, mask.to("meta"), scaling=dim**-0.5),
        lambda: packed_attention(_Attn(), q, k, v, None, scaling=dim**-0.5, packed_lengths=lengths),
    ):
        with FlopCounterMode(display=False) as counter:
            call()
        counts.append(counter.get_total_flops())
    return counts[0], counts[1]


def test_attention_flops_saved_on_the_synthetic_datas_packs(
    tiny_model_dir: str, sft_data_output: str
) -> None:
    cfg = load_config(SftConfig, "configs/sft/qwen3vl_8b.yaml", [f"data.input={sft_data_output}"])
    loaded = load(tiny_model_dir)
    messages, row_ids = read_rows(sft_files(cfg.data.input, cfg.data.include))
    rows = SftRows(messages, row_ids, loaded.processor, loaded.config, MediaSpec(**cfg.media.model_dump()), 0)
    packer = Packer(cfg.packing.length, cfg.packing.max_open, cfg.packing.close_slack)
    bins = []
    for i in range(rows.n_rows):
        item = rows[i]
        if not isinstance(item, Dropped) and packer.fits(item):
            bins += packer.add(item)
    bins += packer.flush()
    lengths = [[len(s) for s in b] for b in bins]
    assert sum(len(b) > 1 for b in lengths) >= 2  # the recipe's packs hold several samples each

    dense_sum = packed_sum = 0
    for pack_lengths in lengths:
        dense, packed = _attention_flops(pack_lengths)
        # torch's sdpa formula: 2 matmuls x 2 FLOPs x L x S x dim per head (the mask does not reduce it)
        assert dense == 4 * 16 * 128 * sum(pack_lengths) ** 2
        assert packed == sum(4 * 16 * 128 * n**2 for n in pack_lengths)
        dense_sum, packed_sum = dense_sum + dense, packed_sum + packed
    saved = 1 - packed_sum / dense_sum
    print(
        f"{len(lengths)} packs, samples per pack {[len(b) for b in lengths]}: attention FLOPs saved {saved:.1%}"
    )
    assert saved > 0.5


def _backward_ops(fn) -> list[str]:
    seen, stack, names = set(), [fn], []
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.append(type(node).__name__)
        stack.extend(n for n, _ in node.next_functions)
    return names


def test_packed_attention_splits_its_inputs_instead_of_slicing_them() -> None:
    # a slice's backward writes its gradient into a zero tensor of the whole input (one per
    # sample); split's backward concatenates the pieces once
    q, k, v = (torch.randn(1, 2, 7, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    out, _ = packed_attention(torch.nn.Module(), q, k, v, None, packed_lengths=(3, 4))
    ops = _backward_ops(out.grad_fn)
    assert "SplitWithSizesBackward0" in ops and "SliceBackward0" not in ops
    # the values: per sample, causal attention over its own slice only
    for lo, hi in ((0, 3), (3, 7)):
        want = torch.nn.functional.scaled_dot_product_attention(
            q[:, :, lo:hi], k[:, :, lo:hi], v[:, :, lo:hi], is_causal=True
        )
        torch.testing.assert_close(out[:, lo:hi], want.transpose(1, 2))
