"""Packing: packed samples never see each other; loss and gradients equal the one-by-one runs."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from transformers.models.qwen3_vl.modeling_qwen3_vl import BaseModelOutputWithDeepstackFeatures

from paravt_core.models import load
from paravt_core.sft.inputs import encode_row
from paravt_core.sft.packing import (
    IGNORE,
    PackedBatch,
    PackedLoss,
    Packer,
    Sample,
    encode_media,
    pack,
    target_logits,
    token_losses,
)
from tests.support.sft_support import image_row, multi_call_row, video_row


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


# ------------------------------------------------------------------------------------------------------------
# Small hand-built inputs and stand-ins (mutation testing runs these once per mutant: no model is loaded).


class _Tower(torch.nn.Module):
    """What ``encode_media`` reads of Qwen3-VL's vision tower: the patch sizes, ``spatial_merge_size``, and a
    forward that merges each group of 4 patch rows into one token (here: their sum), with two deepstack
    features (2x and 3x the merged tokens). Records what it was called with."""

    spatial_merge_size = 2

    def __init__(self) -> None:
        super().__init__()
        self.patch_embed = SimpleNamespace(in_channels=3, temporal_patch_size=2, patch_size=2)  # 24 per patch
        self.calls: list[dict] = []

    def forward(self, pixels: torch.Tensor, grid_thw: torch.Tensor, **kwargs):
        self.calls.append({"pixels": pixels, "grid_thw": grid_thw, **kwargs})
        merged = pixels.view(-1, 4, pixels.shape[-1]).sum(1)
        return BaseModelOutputWithDeepstackFeatures(
            pooler_output=merged, deepstack_features=[2 * merged, 3 * merged]
        )


class _Text(torch.nn.Module):
    """``model.model.language_model``: returns ``(inputs_embeds,)``, so hidden = the embedding of the ids.
    Takes the media arguments by name like transformers' ``Qwen3VLTextModel``; records its calls."""

    def __init__(self, rows: list[list[float]]) -> None:
        super().__init__()
        self.embed_tokens = torch.nn.Embedding.from_pretrained(
            torch.tensor(rows, dtype=torch.float64), freeze=False
        )
        self.calls: list[dict] = []

    def forward(
        self, inputs_embeds, position_ids, visual_pos_masks=None, deepstack_visual_embeds=None, **kwargs
    ):
        self.calls.append({"position_ids": position_ids, **kwargs})
        return (inputs_embeds,)


class _Body(torch.nn.Module):
    """``model.model``: the vision tower and the language model."""

    def __init__(self, rows: list[list[float]]) -> None:
        super().__init__()
        self.language_model = _Text(rows)
        self.embed = self.language_model.embed_tokens
        self.visual = _Tower()


class _LM(torch.nn.Module):
    """The parts of ``Qwen3VLForConditionalGeneration`` that ``token_losses`` / ``target_logits`` use. The
    head is the identity, so the logits of a token are its embedding row; ``logits_to_keep`` is read the
    way transformers' Qwen3-VL forward reads it (an int keeps the last n, 0 all; a tensor gives indices)."""

    def __init__(self, rows: list[list[float]], logits_dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        self.model = _Body(rows)
        self.lm_head = torch.nn.Linear(len(rows[0]), len(rows[0]), bias=False, dtype=torch.float64)
        with torch.no_grad():
            self.lm_head.weight.copy_(torch.eye(len(rows[0])))
        self.logits_dtype = logits_dtype
        self.calls: list[dict] = []

    def forward(self, input_ids, position_ids, mm_token_type_ids, logits_to_keep=0, **kwargs):
        self.calls.append(kwargs)
        hidden = self.model.embed(input_ids)
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        return SimpleNamespace(logits=self.lm_head(hidden[:, keep]).to(self.logits_dtype))


def _text(ids: list[int], labels: list[int], index: int = -1) -> Sample:
    n = len(ids)
    return Sample(torch.tensor(ids), torch.tensor(labels), torch.zeros(n, dtype=torch.int),
                  torch.arange(n).expand(3, -1), index=index)  # fmt: skip


def _media_batch() -> PackedBatch:
    """Sample a: 3 tokens, two images (grids 1x2x2 and 1x2x4: 4 + 8 patch rows of 2 values, row r = [2r, 2r+1]);
    sample b: 2 tokens, one video (grid 2x2x2: 8 rows, row r = [100 + 2r, 101 + 2r])."""
    a = Sample(torch.tensor([1, 2, 3]), torch.tensor([IGNORE, 2, 3]), torch.tensor([0, 1, 1], dtype=torch.int),
               torch.tensor([[0, 1, 1], [0, 1, 1], [0, 1, 2]]),
               pixel_values=torch.arange(24.0).view(12, 2), image_grid_thw=torch.tensor([[1, 2, 2], [1, 2, 4]]),
               index=7)  # fmt: skip
    b = Sample(torch.tensor([4, 5]), torch.tensor([4, 5]), torch.tensor([2, 0], dtype=torch.int),
               torch.tensor([[3.0, 5.0], [4.0, 5.0], [4.0, 5.0]]),  # float ids: pack must give long ones
               pixel_values_videos=100 + torch.arange(16.0).view(8, 2), video_grid_thw=torch.tensor([[2, 2, 2]]),
               index=9)  # fmt: skip
    return pack([a, b])


def test_pack_lays_out_every_field_by_hand() -> None:
    batch = _media_batch()
    assert batch.input_ids.tolist() == [[1, 2, 3, 4, 5]]
    assert batch.mm_token_type_ids.tolist() == [[0, 1, 1, 2, 0]]
    assert batch.targets.tolist() == [[2, 3, IGNORE, 5, IGNORE]]
    assert batch.position_ids.dtype == torch.long and batch.position_ids.shape == (4, 1, 5)
    assert batch.position_ids[:, 0].tolist() == [
        [0, 1, 2, 0, 1],  # text positions restart per sample
        [0, 1, 1, 3, 5],
        [0, 1, 1, 4, 5],
        [0, 1, 2, 4, 5],
    ]
    assert batch.pixel_values.tolist() == torch.arange(24.0).view(12, 2).tolist()
    assert batch.image_grid_thw.tolist() == [[1, 2, 2], [1, 2, 4]]
    assert batch.pixel_values_videos.tolist() == (100 + torch.arange(16.0).view(8, 2)).tolist()
    assert batch.video_grid_thw.tolist() == [[2, 2, 2]]
    assert batch.lengths == [3, 2] and batch.indices == [7, 9]
    assert batch.tokens == 5 and batch.loss_tokens == 3
    with pytest.raises(ValueError, match=r"^pack\(\) needs at least one sample$"):
        pack([])


def test_model_inputs_hands_over_only_the_present_media() -> None:
    ids, pos, mm, tgt, pv, grid = (torch.zeros(1, 2, dtype=torch.long) for _ in range(6))
    batch = PackedBatch(ids, pos, mm, tgt, pixel_values=pv, image_grid_thw=grid)
    out = batch.model_inputs()
    assert list(out) == ["input_ids", "position_ids", "mm_token_type_ids", "pixel_values", "image_grid_thw"]
    assert [out[k] is v for k, v in zip(out, (ids, pos, mm, pv, grid), strict=True)] == [True] * 5


def test_to_moves_every_field_and_casts_only_pixels() -> None:
    batch = _media_batch()
    moved = batch.to("meta", torch.float16)
    fields = ("input_ids", "position_ids", "mm_token_type_ids", "targets", "pixel_values", "image_grid_thw",
              "pixel_values_videos", "video_grid_thw")  # fmt: skip
    assert [getattr(moved, f).device.type for f in fields] == ["meta"] * 8
    assert [getattr(moved, f).dtype for f in fields] == [
        torch.long, torch.long, torch.int, torch.long, torch.float16, torch.long, torch.float16, torch.long
    ]  # fmt: skip
    assert moved.lengths == [3, 2] and moved.indices == [7, 9]
    # on the CPU, values are kept; without a dtype the pixels keep theirs
    for dtype, pixel_dtype in ((None, torch.float32), (torch.float64, torch.float64)):
        copy = batch.to("cpu", dtype)
        for f in fields:
            assert getattr(copy, f).tolist() == getattr(batch, f).tolist(), f
        assert [copy.pixel_values.dtype, copy.pixel_values_videos.dtype] == [pixel_dtype] * 2
        assert copy.input_ids.dtype == torch.long
    # absent media stay absent
    text = pack([_text([1, 2], [1, 2])]).to("meta", torch.float16)
    assert [text.pixel_values, text.image_grid_thw, text.pixel_values_videos, text.video_grid_thw] == [
        None
    ] * 4


def test_encode_media_runs_the_tower_once_and_splits_its_tokens_per_image_and_video() -> None:
    model = SimpleNamespace(model=SimpleNamespace(visual=_Tower()))
    encoded, zero = encode_media(model, _media_batch())
    (call,) = model.model.visual.calls  # one run for the images and the video together
    assert call["grid_thw"].tolist() == [[1, 2, 2], [1, 2, 4], [2, 2, 2]]
    assert call["return_dict"] is True
    # merged token k = sum of patch rows 4k..4k+3: images [0..11] -> [12, 16], [44, 48], [76, 80];
    # video rows r = [100 + 2r, 101 + 2r] -> [412, 416], [444, 448]. Image 1 has 4 patches (1 token), image 2 has 8 (2).
    assert sorted(encoded) == ["image", "video"]
    image, video = encoded["image"], encoded["video"]
    assert [t.tolist() for t in image.pooler_output] == [[[12, 16]], [[44, 48], [76, 80]]]
    assert [t.tolist() for t in video.pooler_output] == [[[412, 416], [444, 448]]]
    assert [[t.tolist() for t in f] for f in image.deepstack_features] == [
        [[[24, 32]], [[88, 96], [152, 160]]],
        [[[36, 48]], [[132, 144], [228, 240]]],
    ]
    assert [[t.tolist() for t in f] for f in video.deepstack_features] == [
        [[[824, 832], [888, 896]]],
        [[[1236, 1248], [1332, 1344]]],
    ]
    assert zero.shape == () and zero.item() == 0.0
    # only images / only a video: one key each
    only_images = _media_batch()
    only_images.pixel_values_videos = only_images.video_grid_thw = None
    assert list(encode_media(model, only_images)[0]) == ["image"]
    only_video = _media_batch()
    only_video.pixel_values = only_video.image_grid_thw = None
    encoded, _ = encode_media(model, only_video)
    assert list(encoded) == ["video"] and [t.tolist() for t in encoded["video"].pooler_output] == [
        [[412, 416], [444, 448]]
    ]


def test_encode_media_without_media_on_the_batch_device() -> None:
    tower = _Tower()
    model = SimpleNamespace(model=SimpleNamespace(visual=tower))
    batch = pack([_text([1, 2, 3], [1, 2, 3])]).to("meta")
    encoded, zero = encode_media(model, batch)  # by default a text batch does not run the tower
    assert encoded == {} and tower.calls == []
    assert zero.shape == () and zero.device.type == "meta"
    encoded, term = encode_media(model, batch, always=True)
    (call,) = (
        tower.calls
    )  # one blank group of 2x2 patches of 3 x 2 x 2 x 2 = 24 values, on the batch's device
    assert encoded == {} and call["pixels"].shape == (4, 24) and call["pixels"].device.type == "meta"
    assert call["grid_thw"].device.type == "meta" and call["return_dict"] is True
    assert term.shape == () and term.device.type == "meta"
    # a tower whose blank outputs are exactly 0 still gives a 0 term (0 * 0, not 0 / 0)
    _, term = encode_media(model, pack([_text([1, 2], [1, 2])]), always=True)
    assert term.item() == 0.0


def test_encode_media_asks_a_real_tower_for_an_output_object() -> None:
    # transformers' Qwen3-VL vision tower returns a plain tuple when its config says return_dict=False,
    # unless the call asks for an output object.
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

    config = Qwen3VLVisionConfig(
        depth=1, hidden_size=8, intermediate_size=8, num_heads=1, in_channels=1, patch_size=2,
        temporal_patch_size=1, spatial_merge_size=2, out_hidden_size=4, num_position_embeddings=4,
        deepstack_visual_indexes=[0], return_dict=False,
    )  # fmt: skip
    tower = Qwen3VLVisionModel(config)
    model = SimpleNamespace(model=SimpleNamespace(visual=tower))
    _, term = encode_media(model, pack([_text([1, 2], [1, 2])]), always=True)
    term.backward()
    assert term.item() == 0.0 and tower.merger.linear_fc2.weight.grad is not None


# Stand-in language model for the loss: 3 tokens, logits of token 0 = [0, 0, 0] (uniform),
# token 1 = [0, ln 2, 0] (softmax 1/4, 1/2, 1/4), token 2 = [ln 3, 0, 0] (softmax 3/5, 1/5, 1/5).
_ROWS = [[0.0, 0.0, 0.0], [0.0, math.log(2), 0.0], [math.log(3), 0.0, 0.0]]


def _head_rows(run) -> list[int]:
    """Rows of every ``linear`` (the head) that ``run()`` computes, in order."""
    rows: list[int] = []

    class Spy(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.nn.functional.linear:
                rows.append(int(args[0].shape[0]))
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Spy():
        run()
    return rows


def test_token_losses_by_hand() -> None:
    lm = _LM(_ROWS)
    # ids 1, 0, 2, 1; targets 0, 2, 1, -: -log(1/4) - log(1/3) - log(1/5) = ln 60
    batch = pack([_text([1, 0, 2, 1], [IGNORE, 0, 2, 1])])
    loss = token_losses(lm, batch)
    assert loss.item() == pytest.approx(math.log(60), rel=1e-12)
    assert lm.model.visual.calls == []  # a text batch runs no tower unless asked
    assert lm.model.language_model.calls[0]["use_cache"] is False
    assert token_losses(lm, batch, always_run_vision=True).item() == pytest.approx(math.log(60), rel=1e-12)
    assert len(lm.model.visual.calls) == 1
    # the head runs on `chunk` positions at a time: 1024 by default
    long = pack([_text([0] * 1026, [0] * 1026)])  # 1025 targets, each -log(1/3)
    assert _head_rows(lambda: token_losses(lm, long)) == [1024, 1]
    assert _head_rows(lambda: token_losses(lm, batch, chunk=2)) == [2, 1]
    assert token_losses(lm, long).item() == pytest.approx(1025 * math.log(3), rel=1e-12)


def test_packed_loss_is_token_losses_of_its_inner_model() -> None:
    lm = _LM(_ROWS)
    batch = pack([_text([1, 0, 2, 1], [IGNORE, 0, 2, 1])])
    module = PackedLoss(lm)
    assert module.inner is lm and module.always_run_vision is False and module.chunk == 1024
    assert module(batch).item() == pytest.approx(math.log(60), rel=1e-12)
    assert lm.model.visual.calls == []
    long = pack([_text([0] * 1026, [0] * 1026)])
    assert _head_rows(lambda: module(long)) == [1024, 1]
    module = PackedLoss(lm, always_run_vision=True, chunk=2)
    assert _head_rows(lambda: module(batch)) == [2, 1]
    assert len(lm.model.visual.calls) == 1
    assert module(batch).item() == pytest.approx(math.log(60), rel=1e-12)


def test_target_logits_keeps_only_positions_with_a_target() -> None:
    rows = [[1.0, 0.0, 2.0], [0.0, 3.0, 1.0], [2.0, 2.0, 2.0]]  # exact in bfloat16
    # targets: a = [-, 1, -], b = [2, -]: positions 1 (token 0) and 3 (token 1) have one
    batch = pack([_text([2, 0, 1], [IGNORE, IGNORE, 1]), _text([1, 2], [IGNORE, 2])])
    for dtype, out_dtype in ((torch.bfloat16, torch.float32), (torch.float64, torch.float64)):
        lm = _LM(rows, logits_dtype=dtype)
        keep, logits = target_logits(lm, batch, **batch.model_inputs())
        assert keep.tolist() == [1, 3]
        assert logits.dtype == out_dtype and logits.tolist() == [[1.0, 0.0, 2.0], [0.0, 3.0, 1.0]]
        assert lm.calls == [{"use_cache": False}]  # a training forward builds no KV cache


def test_packer_defaults_and_argument_checks() -> None:
    # defaults: at most 4 open bins; a bin closes within 64 tokens of packing_length
    packer = Packer(1000)
    out = [
        [len(s) for s in b]
        for i, n in enumerate([501, 502, 503, 504, 505])
        for b in packer.add(_sample(n, i))
    ]
    assert out == [[505]]  # the fifth open bin is one too many: the fullest goes
    packer = Packer(1000)
    assert packer.add(_sample(935, 0)) == []  # 935 < 1000 - 64
    assert [[len(s) for s in b] for b in packer.add(_sample(1, 1))] == [[935, 1]]  # 936 closes
    assert packer.fits(_sample(1000, 2)) and not packer.fits(_sample(1001, 2))
    packer.add(_sample(7, 3))
    assert [[len(s) for s in b] for b in packer.flush()] == [[7]]
    assert packer.pending() == [] and packer.flush() == []  # empty and usable after a flush
    assert packer.add(_sample(1000, 4))[0][0].index == 4
    Packer(1, max_open=1, close_slack=0)  # the smallest valid settings
    for bad in (
        {"packing_length": 0},
        {"packing_length": 8, "max_open": 0},
        {"packing_length": 8, "close_slack": -1},
    ):
        with pytest.raises(ValueError, match=r"^need packing_length >= 1, max_open >= 1, close_slack >= 0$"):
            Packer(**bad)


def test_a_bin_landing_exactly_on_the_close_threshold_closes() -> None:
    """packing_length 10, close_slack 3: a bin closes at >= 10 - 3 = 7 tokens.
    4 -> A=[4]; 3 -> A=[4,3] = 7 tokens: exactly the threshold, emitted; 6 -> B=[6] (6 < 7, stays open)."""
    packer = Packer(10, max_open=4, close_slack=3)
    out = [[len(s) for s in b] for i, n in enumerate([4, 3, 6]) for b in packer.add(_sample(n, i))]
    assert out == [[4, 3]]
    assert packer.pending() == [[2]]
