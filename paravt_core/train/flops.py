"""Model FLOPs of one training step of Qwen3-VL, counted from the batch: the one rule behind every MFU figure.

MFU (model-FLOPs utilisation) is the FLOPs the model needs for the step over the time and the GPUs' peak.
What the step needs, per part (2 FLOPs per multiply-accumulate, a backward = 2 x its forward):

- **decoder layers**: their linear layers (q, k, v, o, gate, up, down) on every token of the pack,
  fwd + bwd = 6 x decoder linear parameters x tokens;
- **causal attention**: per packed sample of length L, the QK^T and AV products of its own causal block,
  L (L + 1) / 2 query-key pairs per head and layer (samples never attend to each other:
  ``paravt_core.train.attention``); fwd + bwd = 3 x forward;
- **lm_head**: only at the positions that have a target. ``sft.packing.target_hidden`` keeps those
  positions and ``train.logprobs.target_logprobs`` runs the head on them alone, so the head costs
  6 x hidden x vocab x loss tokens (its weight is trained: the backward makes both gradients);
- **vision tower**: per patch its blocks' linear layers and the patch embedding (a convolution whose stride
  is its kernel: a linear layer per patch), per merged token (patches / merge²) the merger and the
  deepstack mergers, and per image or video frame group its bidirectional attention over that group's
  patches (Qwen3-VL's ``cu_seqlens``). Frozen (``train.freeze_vision``, the recipes): forward only, no
  gradient flows into it; trained: fwd + bwd (the patch embedding's input needs no gradient);
- **embedding lookups**, norms, activations, rotary and the deepstack additions: 0 (no matmul; biases left
  out too, under 0.1 % of a linear layer).

Recompute is not model FLOPs (the MFU convention): :class:`StepFlops` keeps it apart as ``recompute``, and
``hardware`` = model + recompute is what the GPU really executes (for HFU and for the plan's time model).
Recomputed here: one forward of every decoder layer (and of every vision block when the tower is trained)
under activation checkpointing (``train.fsdp.checkpoint_layers``) but its last matmul, and always one
forward of lm_head, whose chunks run under ``torch.utils.checkpoint`` (``train.logprobs``). The last matmul
(the MLP's down projection, fc2 in a vision block) only feeds the residual add, which saves nothing for the
backward, and torch's non-reentrant checkpoint stops recomputing once every saved tensor is back
(``tests/unit/test_flops.py`` checks all of this against ``torch.utils.flop_counter`` on a real step).
Kernel-internal recompute (flash / memory-efficient attention recomputing the scores in its backward) is
not counted: it depends on the kernel.

The older rule, 6 x all parameters x all tokens (:func:`six_n_flops`), counts the frozen vision tower and
the embeddings as trained on every token and leaves out attention: kept only as ``mfu_6n``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Shapes:
    """The Qwen3-VL shapes the count needs (read from the Hugging Face config by :func:`model_shapes`)."""

    hidden: int  # text_config.hidden_size
    intermediate: int  # text_config.intermediate_size
    heads: int  # text_config.num_attention_heads
    kv_heads: int  # text_config.num_key_value_heads
    head_dim: int  # text_config.head_dim
    layers: int  # text_config.num_hidden_layers
    vocab: int  # text_config.vocab_size (lm_head's rows, tied to the embedding or not: the same matmul)
    vision_depth: int  # vision_config.depth
    vision_hidden: int  # vision_config.hidden_size (= heads x head_dim of the vision attention)
    vision_intermediate: int  # vision_config.intermediate_size
    vision_out: int  # vision_config.out_hidden_size (the mergers' output: the language model's hidden)
    merge: int  # vision_config.spatial_merge_size
    patch_in: int  # in_channels x temporal_patch_size x patch_size²: the values of one patch
    deepstack: int  # len(vision_config.deepstack_visual_indexes): mergers besides the final one


def model_shapes(config: Any) -> Shapes:
    """:class:`Shapes` of a ``Qwen3VLConfig``."""
    t, v = config.text_config, config.vision_config
    return Shapes(
        hidden=t.hidden_size,
        intermediate=t.intermediate_size,
        heads=t.num_attention_heads,
        kv_heads=t.num_key_value_heads,
        head_dim=t.head_dim,
        layers=t.num_hidden_layers,
        vocab=t.vocab_size,
        vision_depth=v.depth,
        vision_hidden=v.hidden_size,
        vision_intermediate=v.intermediate_size,
        vision_out=v.out_hidden_size,
        merge=v.spatial_merge_size,
        patch_in=v.in_channels * v.temporal_patch_size * v.patch_size**2,
        deepstack=len(v.deepstack_visual_indexes or ()),
    )


# ------------------------------------------------------------------------------ multiply-accumulates


def decoder_layer_params(s: Shapes) -> int:
    """Linear weights of one decoder layer: q, k, v, o (grouped-query: k and v have ``kv_heads``) + the
    gated MLP (gate, up, down). Their multiply-accumulates per token."""
    attention = s.hidden * s.head_dim * (2 * s.heads + 2 * s.kv_heads)
    return attention + 3 * s.hidden * s.intermediate


def head_params(s: Shapes) -> int:
    """lm_head's weight: multiply-accumulates per position it runs on."""
    return s.hidden * s.vocab


def vision_block_params(s: Shapes) -> int:
    """Linear weights of one vision block: qkv, proj and the (ungated) MLP fc1, fc2."""
    return 4 * s.vision_hidden**2 + 2 * s.vision_hidden * s.vision_intermediate


def patch_embed_params(s: Shapes) -> int:
    """The patch embedding's weight (a Conv3d whose stride equals its kernel: one matmul per patch)."""
    return s.patch_in * s.vision_hidden


def merger_params(s: Shapes) -> int:
    """One patch merger's linear weights (fc1 on merge² concatenated patches, fc2 to the text hidden)."""
    wide = s.vision_hidden * s.merge**2
    return wide * wide + wide * s.vision_out


def causal_attention_macs(s: Shapes, lengths: Iterable[int]) -> int:
    """Forward multiply-accumulates of the language model's attention: per sample, QK^T and AV over its
    L (L + 1) / 2 causal query-key pairs, per query head and layer (= heads x head_dim x L (L + 1))."""
    return s.layers * s.heads * s.head_dim * sum(n * (n + 1) for n in lengths)


def vision_attention_macs(s: Shapes, groups: Iterable[int]) -> int:
    """Forward multiply-accumulates of the vision tower's attention: bidirectional within each group of
    patches (n² pairs), QK^T and AV over the whole vision hidden size, per block."""
    return s.vision_depth * 2 * s.vision_hidden * sum(n * n for n in groups)


# ------------------------------------------------------------------------------ one pack, one step


@dataclass(frozen=True)
class PackFacts:
    """What the count needs of one packed sequence; all of it known on the host before the step."""

    lengths: tuple[int, ...]  # tokens of each packed sample (PackedBatch.lengths)
    loss_tokens: int  # positions with a target: the only ones lm_head runs on
    groups: tuple[int, ...] = ()  # patches of each vision attention group: an image, or one video frame group

    @property
    def tokens(self) -> int:
        return sum(self.lengths)

    @property
    def patches(self) -> int:
        return sum(self.groups)


def _groups(grid_thw: Any) -> list[int]:
    """Per [t, h, w] row: t groups of h x w patches (the tower attends within one frame group)."""
    return [] if grid_thw is None else [h * w for t, h, w in grid_thw.tolist() for _ in range(t)]


def pack_facts(batch: Any) -> PackFacts:
    """:class:`PackFacts` of a host ``PackedBatch``. It reads the (host) grid tensors: call it where no step
    waits (the trainer: the background thread that makes the next step's packs; the plan)."""
    return PackFacts(
        lengths=tuple(batch.lengths),
        loss_tokens=batch.loss_tokens,
        groups=tuple(_groups(batch.image_grid_thw) + _groups(batch.video_grid_thw)),
    )


@dataclass(frozen=True)
class StepFlops:
    """FLOPs of one or more training passes. ``model``: fwd + bwd, what MFU counts. ``recompute``: forward
    work the backward redoes (activation checkpointing, lm_head's chunks), not model FLOPs. ``forward``:
    one forward pass alone (what a no-grad log-prob pass of the same packs costs)."""

    model: float = 0.0
    recompute: float = 0.0
    forward: float = 0.0

    @property
    def hardware(self) -> float:
        """What the GPU executes: model FLOPs + recompute (the numerator of HFU)."""
        return self.model + self.recompute

    def __add__(self, other: StepFlops) -> StepFlops:
        return StepFlops(
            self.model + other.model, self.recompute + other.recompute, self.forward + other.forward
        )

    def __mul__(self, n: float) -> StepFlops:
        return StepFlops(self.model * n, self.recompute * n, self.forward * n)


def pack_flops(
    s: Shapes, facts: PackFacts, *, vision_trained: bool = False, checkpointing: bool = True
) -> StepFlops:
    """FLOPs of one training pass (forward + backward) over one pack (see the module docstring)."""
    merged = facts.patches // s.merge**2
    # forward, per part (2 FLOPs per multiply-accumulate)
    decoder = 2.0 * s.layers * decoder_layer_params(s) * facts.tokens
    attention = 2.0 * causal_attention_macs(s, facts.lengths)
    head = 2.0 * head_params(s) * facts.loss_tokens
    blocks = 2.0 * (
        s.vision_depth * vision_block_params(s) * facts.patches + vision_attention_macs(s, facts.groups)
    )
    embed = 2.0 * patch_embed_params(s) * facts.patches
    mergers = 2.0 * (1 + s.deepstack) * merger_params(s) * merged
    forward = decoder + attention + head + blocks + embed + mergers
    text = 3.0 * (decoder + attention + head)  # every text part is trained: backward = 2 x forward
    # a frozen tower: forward only (no parameter of it needs a gradient, its input pixels neither)
    vision = 3.0 * (blocks + mergers) + 2.0 * embed if vision_trained else blocks + embed + mergers
    recompute = head  # lm_head's chunks always run under torch.utils.checkpoint (train.logprobs)
    if checkpointing:  # train.fsdp.checkpoint_layers: decoder layers; vision blocks only when trained
        # each layer's last matmul is not rerun (torch's checkpoint stops early: nothing saves its output)
        down = 2.0 * s.layers * s.hidden * s.intermediate * facts.tokens
        fc2 = 2.0 * s.vision_depth * s.vision_hidden * s.vision_intermediate * facts.patches
        recompute += decoder - down + attention + (blocks - fc2 if vision_trained else 0.0)
    return StepFlops(model=text + vision, recompute=recompute, forward=forward)


def step_flops(
    s: Shapes, packs: Iterable[PackFacts], *, vision_trained: bool = False, checkpointing: bool = True
) -> StepFlops:
    """FLOPs of one optimizer step over ``packs`` (one training pass each)."""
    total = StepFlops()
    for facts in packs:
        total = total + pack_flops(s, facts, vision_trained=vision_trained, checkpointing=checkpointing)
    return total


def six_n_flops(parameters: int, tokens: int) -> float:
    """The older rule, kept for ``mfu_6n`` only: 6 x every parameter x every token."""
    return 6.0 * parameters * tokens


def utilisation(flops: float, seconds: float, world: int, peak_tflops: float) -> float | None:
    """``flops`` done in ``seconds`` on ``world`` GPUs over their peak (TFLOP/s each); None when the peak
    is unknown (a CPU) or nothing was timed."""
    if peak_tflops <= 0 or world <= 0 or seconds <= 0:
        return None
    return flops / (seconds * world * peak_tflops * 1e12)
