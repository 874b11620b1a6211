"""Packing: packed samples never see each other; loss and gradients equal the one-by-one runs."""

from __future__ import annotations

import pytest
import torch

from paravt_core.models import load
from paravt_core.sft.inputs import encode_row
from paravt_core.sft.packing import IGNORE, Packer, Sample, pack, token_losses
from tests.sft_support import image_row, multi_call_row, video_row


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def test_packed_loss_and_gradients_equal_one_by_one(
    tiny_model_dir: str, video_4s: str, image_64: str
) -> None:
    loaded = load(tiny_model_dir)
    # float64 so that the only differences left are summation order: tolerance 1e-9 relative.
    model = loaded.model.double().train()
    rows = [video_row(video_4s, "A"), multi_call_row(), image_row(image_64), video_row(video_4s, "B")]
    samples = [encode_row(r, loaded.processor, loaded.config, index=i) for i, r in enumerate(rows)]
    for s in samples:
        for name in ("pixel_values", "pixel_values_videos"):
            if getattr(s, name) is not None:
                setattr(s, name, getattr(s, name).double())

    batch = pack(samples)
    assert batch.lengths == [len(s) for s in samples]
    assert batch.loss_tokens == sum(s.loss_tokens for s in samples)
    # every sample's text positions restart at 0
    starts = torch.tensor([0, *batch.lengths]).cumsum(0)[:-1]
    assert batch.position_ids[0, 0, starts].tolist() == [0, 0, 0, 0]

    model.zero_grad()
    packed = token_losses(model, batch)
    packed.backward()
    packed_grads = _grads(model)

    model.zero_grad()
    alone = torch.zeros((), dtype=torch.float64)
    for s in samples:
        loss = token_losses(model, pack([s]))
        loss.backward()  # gradients accumulate: the sum over samples
        alone = alone + loss.detach()
    alone_grads = _grads(model)

    # summed losses equal <=> token-weighted means equal (same token count, checked above)
    assert packed.item() == pytest.approx(alone.item(), rel=1e-9)
    assert packed_grads.keys() == alone_grads.keys()
    assert any("visual" in n for n in packed_grads)  # the vision tower is in the comparison too
    for name, grad in packed_grads.items():
        torch.testing.assert_close(grad, alone_grads[name], rtol=1e-9, atol=1e-12, msg=name)

    # Control: the same sequence with one running text position (samples may attend to each other)
    # gives a different loss (here ~1e-3 relative), so the equality above is not vacuous.
    leaky = pack(samples)
    leaky.position_ids[0, 0] = torch.arange(leaky.tokens)
    with torch.no_grad():
        assert abs(token_losses(model, leaky).item() - alone.item()) > 1e-5 * alone.item()  # 10^4 x tol


def _sample(n: int, index: int) -> Sample:
    ids = torch.arange(n)
    return Sample(ids, ids.clone(), torch.zeros(n, dtype=torch.int), ids.expand(3, -1), index=index)


def test_packer_first_fit_by_hand() -> None:
    lengths = [5, 3, 4, 2, 6]
    # packing_length 8, up to 2 open bins, a bin closes when exactly full:
    # 5 -> A=[5]; 3 -> A=[5,3] full, emitted; 4 -> B=[4]; 2 -> B=[4,2]; 6 -> does not fit B -> C=[6].
    packer = Packer(8, max_open=2, close_slack=0)
    out = [[len(s) for s in b] for i, n in enumerate(lengths) for b in packer.add(_sample(n, i))]
    assert out == [[5, 3]]
    assert packer.pending() == [[2, 3], [4]]
    assert [[len(s) for s in b] for b in packer.flush()] == [[4, 2], [6]]
    # next-fit (one open bin): at 6 two bins are open, the fullest (B=6, first of the tie with C=6) goes.
    packer = Packer(8, max_open=1, close_slack=0)
    out = [[len(s) for s in b] for i, n in enumerate(lengths) for b in packer.add(_sample(n, i))]
    assert out == [[5, 3], [4, 2]]
    assert [[len(s) for s in b] for b in packer.flush()] == [[6]]
    assert not packer.fits(_sample(9, 0))
    with pytest.raises(ValueError, match="exceeds packing_length"):
        packer.add(_sample(9, 0))


def test_pack_shifts_labels_inside_each_sample() -> None:
    a = Sample(torch.tensor([1, 2, 3]), torch.tensor([IGNORE, 2, 3]), torch.zeros(3, dtype=torch.int),
               torch.arange(3).expand(3, -1))  # fmt: skip
    b = Sample(torch.tensor([4, 5]), torch.tensor([4, 5]), torch.zeros(2, dtype=torch.int),
               torch.arange(2).expand(3, -1))  # fmt: skip
    batch = pack([a, b])
    # a: token 1 predicts 2, token 2 predicts 3, token 3 predicts nothing (not b's first token 4);
    # b: token 4 predicts 5, token 5 predicts nothing.
    assert batch.targets.tolist() == [[2, 3, IGNORE, 5, IGNORE]]
    assert batch.position_ids[:, 0].tolist() == [[0, 1, 2, 0, 1]] * 4


def test_text_only_batch_still_runs_the_vision_tower_when_asked(tiny_model_dir: str) -> None:
    # Under FSDP every rank must run (and backpropagate through) the same sharded vision blocks, even when
    # its sequence has no media; the blank pass must not change the loss.
    loaded = load(tiny_model_dir)
    model = loaded.model.train()
    batch = pack([encode_row(multi_call_row(), loaded.processor, loaded.config)])
    plain = token_losses(model, batch)
    model.zero_grad()
    forced = token_losses(model, batch, always_run_vision=True)
    forced.backward()
    assert forced.item() == plain.item()
    vision = {n: p.grad for n, p in model.named_parameters() if n.startswith("model.visual.")}
    assert vision and all(g is not None and not g.any() for g in vision.values())  # reached, zero
