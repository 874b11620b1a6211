"""Per-sample Qwen3-VL tensors, packing several samples into one sequence, and the token-level loss.

Reused by the RL learner: anything that has token ids, a label per token, the media tensors and the
sample's own 3-D M-RoPE ids can be packed with :func:`pack` and scored with :func:`token_losses` (or its
:func:`target_logits`, what the RL learner's log-probs start from).

How packed samples are kept apart (checked by ``tests/unit/test_sft_packing.py`` against one-by-one runs):

- **positions**: every sample keeps the M-RoPE ids it would have alone (``Sample.position_ids``, 3 x L,
  computed by transformers' own ``Qwen3VLModel.get_rope_index``). :func:`pack` concatenates them and puts a
  fourth row in front: the plain text position, restarting at 0 for each sample. transformers' Qwen3-VL
  takes a 4-row ``position_ids`` as (text positions, T, H, W);
- **attention**: with ``attention_mask=None`` and those text positions, transformers' mask builder sees
  where positions restart and makes a block-diagonal causal mask (sdpa / eager); flash-attention-2 turns
  the same restarts into varlen ``cu_seqlens``. No sample attends to another;
- **vision**: the vision tower already attends within each image / frame group only (``cu_seqlens`` of
  ``*_grid_thw``), so media tensors are simply concatenated in sample order;
- **targets**: labels are shifted *inside* each sample (``targets[t]`` is the label of token t+1 of the same
  sample, -100 on its last token), so no token is trained to predict the next sample's first token.

Layout of :func:`pack`'s output (a :class:`PackedBatch`), batch dimension 1::

    input_ids (1, L)   position_ids (4, 1, L)   mm_token_type_ids (1, L)   targets (1, L)
    pixel_values (sum patches, D) + image_grid_thw (n_images, 3)          (None when no image)
    pixel_values_videos (sum patches, D) + video_grid_thw (n_videos, 3)  (None when no video)
    lengths: tokens per sample, in order; loss_tokens: number of targets != -100
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

IGNORE = -100  # label of a token that is not trained (transformers' convention)


@dataclass(eq=False)  # identity: fields hold tensors
class Sample:
    """One training sequence, as the model would take it alone (batch dimension dropped)."""

    input_ids: torch.Tensor  # (L,) long
    labels: torch.Tensor  # (L,) long: the token id where trained, IGNORE elsewhere (not shifted)
    mm_token_type_ids: torch.Tensor  # (L,) int: 0 text, 1 image, 2 video
    position_ids: torch.Tensor  # (3, L) long: the sample's own M-RoPE ids (T, H, W)
    pixel_values: torch.Tensor | None = None
    image_grid_thw: torch.Tensor | None = None  # (n_images, 3)
    pixel_values_videos: torch.Tensor | None = None
    video_grid_thw: torch.Tensor | None = None  # (n_videos, 3)
    index: int = -1  # position in the data stream (global row index); -1 when not from a stream
    row_id: str = ""

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def loss_tokens(self) -> int:
        """Tokens that are predicted with a loss (every trained label except a sample's first token)."""
        return int((self.labels[1:] != IGNORE).sum())


@dataclass(eq=False)  # identity: fields hold tensors
class PackedBatch:
    """Several samples in one sequence (see the module docstring for the layout)."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    mm_token_type_ids: torch.Tensor
    targets: torch.Tensor
    pixel_values: torch.Tensor | None = None
    image_grid_thw: torch.Tensor | None = None
    pixel_values_videos: torch.Tensor | None = None
    video_grid_thw: torch.Tensor | None = None
    lengths: list[int] = field(default_factory=list)
    indices: list[int] = field(default_factory=list)  # Sample.index of each packed sample
    # Worked out on the host by pack() so that the step never reads a device tensor back (a sync per
    # micro-batch): the positions that have a target, the patches of each image and of each video.
    keep: torch.Tensor | None = None
    image_patches: list[int] | None = None
    video_patches: list[int] | None = None

    @property
    def tokens(self) -> int:
        return int(self.input_ids.shape[1])

    @property
    def loss_tokens(self) -> int:
        if self.keep is not None:  # a shape: no read of a device tensor
            return int(self.keep.shape[0])
        return int((self.targets != IGNORE).sum())

    def model_inputs(self) -> dict[str, Any]:
        """Keyword arguments for ``Qwen3VLForConditionalGeneration.forward`` (no attention mask on purpose)."""
        out: dict[str, Any] = {
            "input_ids": self.input_ids,
            "position_ids": self.position_ids,
            "mm_token_type_ids": self.mm_token_type_ids,
        }
        for name in ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    def target_positions(self) -> torch.Tensor:
        """Positions that have a target ([K], on the batch's device)."""
        if self.keep is not None:
            return self.keep
        return torch.nonzero(self.targets[0] != IGNORE).flatten()

    def pin_memory(self) -> PackedBatch:
        """A copy in page-locked host memory, so that ``to(cuda)`` is an asynchronous copy."""
        return self._map(lambda t, pixels: t.pin_memory())

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> PackedBatch:
        """Copy on ``device`` (asynchronous from pinned memory); pixel tensors also cast to ``dtype`` when given."""
        return self._map(
            lambda t, pixels: t.to(
                device, dtype=dtype if pixels and dtype is not None else None, non_blocking=True
            )
        )

    def _map(self, fn: Any) -> PackedBatch:
        def move(t: torch.Tensor | None, pixels: bool = False) -> torch.Tensor | None:
            return None if t is None else fn(t, pixels)

        return PackedBatch(
            input_ids=move(self.input_ids),
            position_ids=move(self.position_ids),
            mm_token_type_ids=move(self.mm_token_type_ids),
            targets=move(self.targets),
            pixel_values=move(self.pixel_values, True),
            image_grid_thw=move(self.image_grid_thw),
            pixel_values_videos=move(self.pixel_values_videos, True),
            video_grid_thw=move(self.video_grid_thw),
            lengths=list(self.lengths),
            indices=list(self.indices),
            keep=move(self.keep),
            image_patches=self.image_patches,
            video_patches=self.video_patches,
        )


def mrope_position_ids(
    config: Any,
    input_ids: torch.Tensor,
    mm_token_type_ids: torch.Tensor,
    image_grid_thw: torch.Tensor | None = None,
    video_grid_thw: torch.Tensor | None = None,
) -> torch.Tensor:
    """The (3, L) M-RoPE ids of one unpadded sample, computed by transformers' Qwen3-VL code itself.

    ``get_rope_index`` is a model method that only reads ``config.vision_config.spatial_merge_size`` and its
    sibling ``get_vision_position_ids``; calling it on a small stand-in lets data-loader workers compute the
    exact ids without building the model (``config``: the model's ``Qwen3VLConfig``).
    """
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

    class _Rope:  # what get_rope_index touches on ``self``
        get_vision_position_ids = Qwen3VLModel.get_vision_position_ids

        def __init__(self, cfg: Any):
            self.config = cfg

    position_ids, _ = Qwen3VLModel.get_rope_index(
        _Rope(config),
        input_ids.view(1, -1),
        mm_token_type_ids.view(1, -1),
        image_grid_thw=image_grid_thw,
        video_grid_thw=None if video_grid_thw is None else video_grid_thw.clone(),
    )
    return position_ids[:, 0, :]


def shifted_targets(labels: torch.Tensor) -> torch.Tensor:
    """``targets[t] = labels[t + 1]`` within one sample; the last token predicts nothing."""
    out = torch.full_like(labels, IGNORE)
    out[:-1] = labels[1:]
    return out


def _cat(parts: Sequence[torch.Tensor | None]) -> torch.Tensor | None:
    present = [p for p in parts if p is not None]
    return torch.cat(present) if present else None


def pack(samples: Sequence[Sample]) -> PackedBatch:
    """Concatenate samples into one sequence that the model runs with no cross-sample attention."""
    if not samples:
        raise ValueError("pack() needs at least one sample")
    text_positions = [torch.arange(len(s), dtype=torch.long) for s in samples]
    mrope = torch.cat([s.position_ids.to(torch.long) for s in samples], dim=1)
    position_ids = torch.cat([torch.cat(text_positions).view(1, -1), mrope], dim=0).unsqueeze(1)
    targets = torch.cat([shifted_targets(s.labels) for s in samples]).view(1, -1)
    image_grid_thw = _cat([s.image_grid_thw for s in samples])
    video_grid_thw = _cat([s.video_grid_thw for s in samples])
    return PackedBatch(
        input_ids=torch.cat([s.input_ids for s in samples]).view(1, -1),
        position_ids=position_ids,
        mm_token_type_ids=torch.cat([s.mm_token_type_ids for s in samples]).view(1, -1),
        targets=targets,
        pixel_values=_cat([s.pixel_values for s in samples]),
        image_grid_thw=image_grid_thw,
        pixel_values_videos=_cat([s.pixel_values_videos for s in samples]),
        video_grid_thw=video_grid_thw,
        lengths=[len(s) for s in samples],
        indices=[s.index for s in samples],
        keep=torch.nonzero(targets[0] != IGNORE).flatten(),
        image_patches=None if image_grid_thw is None else image_grid_thw.prod(-1).tolist(),
        video_patches=None if video_grid_thw is None else video_grid_thw.prod(-1).tolist(),
    )


def encode_media(model: Any, batch: PackedBatch, always: bool = False) -> tuple[dict[str, Any], torch.Tensor]:
    """Run the vision tower **once** on all images and videos of ``batch``.

    Returns ``{"image"|"video": tower output split per image / video}`` for :func:`target_hidden` (so the tower
    runs once, not once for images and once for videos) and a zero-valued term to add to the loss. Under FSDP every rank must run
    the same sharded modules the same number of times, forward and backward, whatever its batch holds; with
    ``always`` a batch without media runs the tower on one blank 32x32 patch group and the zero term ties
    its output into the loss, so the backward reaches the vision blocks on every rank.
    """
    from transformers.models.qwen3_vl.modeling_qwen3_vl import BaseModelOutputWithDeepstackFeatures

    visual = model.model.visual
    parts = [(batch.pixel_values, batch.image_grid_thw), (batch.pixel_values_videos, batch.video_grid_thw)]
    present = [(p, g) for p, g in parts if p is not None]
    zero = torch.zeros((), device=batch.input_ids.device)
    if not present and not always:
        return {}, zero
    if present:
        pixels = torch.cat([p for p, _ in present])
        grids = torch.cat([g for _, g in present])
    else:
        embed = visual.patch_embed
        patch_dim = embed.in_channels * embed.temporal_patch_size * embed.patch_size**2
        pixels = torch.zeros(4, patch_dim, device=batch.input_ids.device, dtype=torch.float32)
        grids = torch.tensor([[1, 2, 2]], device=batch.input_ids.device)
    out = visual(pixels, grid_thw=grids, return_dict=True)  # the patch embedding casts to its dtype
    if not present:
        blank = out.pooler_output.sum() + sum(f.sum() for f in out.deepstack_features)
        return {}, 0.0 * blank
    merge = visual.spatial_merge_size**2
    host = [batch.image_patches, batch.video_patches]
    if all(h is not None for h, (p, _) in zip(host, parts, strict=True) if p is not None):
        sizes = [n // merge for h, (p, _) in zip(host, parts, strict=True) if p is not None for n in h]
    else:
        sizes = (grids.prod(-1) // merge).tolist()
    pooled = torch.split(out.pooler_output, sizes)
    deep = [torch.split(f, sizes) for f in out.deepstack_features]
    n_images = 0 if batch.image_grid_thw is None else int(batch.image_grid_thw.shape[0])
    encoded: dict[str, Any] = {}
    for name, lo, hi in (("image", 0, n_images), ("video", n_images, len(sizes))):
        if hi > lo:
            encoded[name] = BaseModelOutputWithDeepstackFeatures(
                pooler_output=pooled[lo:hi], deepstack_features=[d[lo:hi] for d in deep]
            )
    return encoded, zero


def target_logits(model: Any, batch: PackedBatch, **inputs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions of ``batch`` that have a target [K], their logits in at least float32 [K, vocab]).

    Only those positions go through ``lm_head`` (``logits_to_keep`` takes their indices), so the
    vocabulary-sized logits of prompt and media tokens are never materialized. ``inputs``: the forward's
    keyword arguments (``batch.model_inputs()``, possibly with encoded media). Shared by the SFT loss and the
    RL learner's log-probs.
    """
    from paravt_core.train.attention import forward_kwargs

    keep = batch.target_positions()
    logits = model(
        **inputs, logits_to_keep=keep, use_cache=False, **forward_kwargs(model, batch.lengths)
    ).logits[0]
    return keep, logits.to(torch.promote_types(logits.dtype, torch.float32))  # bf16 logits -> float32


def target_hidden(
    model: Any, batch: PackedBatch, encoded: dict[str, Any] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions of ``batch`` that have a target [K], the language model's last hidden states there [K, H]).

    The head is applied by the caller in chunks (``paravt_core.train.logprobs``), so no [K, vocab] tensor of
    all positions exists at once. ``encoded``: :func:`encode_media`'s media, merged into the token embeddings
    here (``paravt_core.train.media``: not through ``Qwen3VLModel.forward``, whose media arguments differ
    between transformers versions)."""
    from paravt_core.train.attention import forward_kwargs
    from paravt_core.train.media import merge_media

    keep = batch.target_positions()
    inputs = merge_media(model, batch.input_ids, batch.mm_token_type_ids, encoded or {})
    hidden = model.model.language_model(
        position_ids=batch.position_ids, use_cache=False, **inputs, **forward_kwargs(model, batch.lengths)
    )[0][0]
    return keep, hidden[keep]


def token_losses(
    model: Any, batch: PackedBatch, *, always_run_vision: bool = False, chunk: int = 1024
) -> torch.Tensor:
    """Cross-entropy (at least float32, summed, not averaged) of every target of ``batch``.

    Divide by the number of target tokens of the whole optimizer step (all micro-batches, all ranks) for a
    token-weighted mean. ``always_run_vision``: set it under FSDP (see :func:`encode_media`); ``chunk``:
    positions per ``lm_head`` block (``paravt_core.train.logprobs``).
    """
    from paravt_core.train.logprobs import target_logprobs

    encoded, zero = encode_media(model, batch, always=always_run_vision)
    keep, hidden = target_hidden(model, batch, encoded)
    logp = target_logprobs(hidden, model.lm_head.weight, batch.targets[0][keep], chunk=chunk)
    return -logp.sum() + zero


class PackedLoss(torch.nn.Module):
    """``forward(batch) = token_losses(inner, batch)``: the root module to shard with FSDP2.

    FSDP2 gathers the root's parameters in the root's forward, so everything the loss runs (the vision tower
    once, then the language model) must happen inside one; wrapping the Hugging Face model does that. Its
    state-dict keys are the model's with an ``inner.`` prefix.
    """

    def __init__(self, inner: torch.nn.Module, always_run_vision: bool = False, chunk: int = 1024):
        from paravt_core.train.media import require_media_path

        super().__init__()
        require_media_path(inner)
        self.inner = inner
        self.always_run_vision = always_run_vision
        self.chunk = chunk

    def forward(self, batch: PackedBatch) -> torch.Tensor:
        return token_losses(self.inner, batch, always_run_vision=self.always_run_vision, chunk=self.chunk)


# ---------------------------------------------------------------------------------------------- bins


@dataclass(eq=False)  # identity: fields hold tensors
class Bin:
    """Samples waiting to be packed together, and their total length."""

    samples: list[Sample] = field(default_factory=list)
    tokens: int = 0

    def add(self, sample: Sample) -> None:
        self.samples.append(sample)
        self.tokens += len(sample)


class Packer:
    """Greedy first-fit packing of a sample stream into sequences of at most ``packing_length`` tokens.

    Each incoming sample goes into the first open bin it fits in, else into a new bin. A bin is emitted as
    soon as it is full within ``close_slack`` tokens, or, when more than ``max_open`` bins are open, the
    fullest one is emitted. ``max_open = 1`` is plain next-fit (the release's sequential fill); a few open
    bins fill the sequences much better (``benchmarks/sft_inputs.py`` reports the padding share).
    Deterministic for a given stream; :meth:`pending` lists the stream indices of open bins so a resumed run
    can rebuild them exactly.
    """

    def __init__(self, packing_length: int, max_open: int = 4, close_slack: int = 64):
        if packing_length < 1 or max_open < 1 or close_slack < 0:
            raise ValueError("need packing_length >= 1, max_open >= 1, close_slack >= 0")
        self.packing_length = packing_length
        self.max_open = max_open
        self.close_slack = close_slack
        self.open: list[Bin] = []

    def fits(self, sample: Sample) -> bool:
        return len(sample) <= self.packing_length

    def add(self, sample: Sample) -> list[list[Sample]]:
        """Place ``sample`` (which must fit) and return the bins that are complete now."""
        if not self.fits(sample):
            raise ValueError(f"sample of {len(sample)} tokens exceeds packing_length {self.packing_length}")
        target = next((b for b in self.open if b.tokens + len(sample) <= self.packing_length), None)
        if target is None:
            target = Bin()
            self.open.append(target)
        target.add(sample)
        done: list[list[Sample]] = []
        if target.tokens >= self.packing_length - self.close_slack:
            self.open.remove(target)
            done.append(target.samples)
        if len(self.open) > self.max_open:
            fullest = max(self.open, key=lambda b: b.tokens)  # first of equals: max() keeps the earliest
            self.open.remove(fullest)
            done.append(fullest.samples)
        return done

    def flush(self) -> list[list[Sample]]:
        """Emit every open bin (end of data)."""
        done = [b.samples for b in self.open]
        self.open = []
        return done

    def pending(self) -> list[list[int]]:
        """Stream indices of the samples in each open bin, in order."""
        return [[s.index for s in b.samples] for b in self.open]
