"""The ONLY glue between the capacity plan and the trainers: build the model, shard it, make the optimizer and
run one training step, each through the trainers' own public functions.

When the trainers change (one shared core, other precision or checkpointing settings), re-point this module
and nothing else: ``paravt_core.plan.memory`` only needs a :class:`PreparedStep` (the FSDP root module, the
optimizer, a warm-up and a measured step, and the bytes of tensors the step holds outside the root).

Everything here runs inside ``paravt_core.plan.fake.fake_world``: parameters, activations and optimizer
states are fake tensors, token ids and positions are real (see ``fake.py``).

Inputs are synthetic but shaped like the recipe's data (the assumptions are returned in ``notes``):
- SFT: one packed sequence of ``pack_length`` tokens made of rows with one video each (``media.video_max_frames``
  frames at ``media.video_max_pixels``, laid out like the Qwen3-VL processor: per temporal group a timestamp,
  ``<|vision_start|>``, the video pads, ``<|vision_end|>``), a prompt and a trained answer;
- RL: one episode of ``pack_length`` tokens: the overview (``agent.overview_frames`` frames at
  ``agent.max_pixels``, each an image after its timestamp), the question, then generated tokens (trained)
  up to the pack length. Packs run one after another and only per-token log-probs ([L] floats) persist
  between them, so a step's peak is that of its largest pack.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

TIMESTAMP_TOKENS = 6  # "<12.3 seconds>" tokenizes to about this many tokens
SFT_PROMPT_TOKENS = 256  # system prompt + question of one SFT row (untrained)
SFT_ANSWER_TOKENS = 1024  # trained assistant tokens of one SFT row (think, tool calls, answer)
RL_PROMPT_TOKENS = 512  # system prompt with the tool block + question of one episode (untrained)


@dataclass
class PreparedStep:
    root: torch.nn.Module  # the FSDP2 root the step runs
    optimizer: torch.optim.Optimizer
    warmup: Callable[[], None]  # one short step: creates the optimizer states, as step 1 of a run does
    step: Callable[[], None]  # the step that is measured
    # this rank's tensors held through the step outside the root (the RL reference's shards): the tracker is
    # told about them, or it would meet them only through a view in their first use and call them activations
    reference: list[torch.Tensor] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tokens: int = 0  # tokens of the measured pass
    trained_tokens: int = 0


# ------------------------------------------------------------------------------------------ model


def build_model(config: Any, dtype: torch.dtype) -> Any:
    """A Qwen3-VL with ``config``'s shapes (fake weights under ``fake_world``; random ones otherwise)."""
    from transformers import Qwen3VLForConditionalGeneration

    return Qwen3VLForConditionalGeneration._from_config(config, dtype=dtype)  # built in dtype, as loaded


def parts(model: Any) -> dict[str, int]:
    """Parameters per part: vision tower (with its merger), decoder layers + final norm, embeddings, lm_head."""
    inner = model.model
    embed = inner.language_model.embed_tokens.weight
    head = model.lm_head.weight
    vision = sum(p.numel() for p in inner.visual.parameters())
    language = sum(p.numel() for p in inner.language_model.parameters()) - embed.numel()
    out = {"vision_tower": vision, "language_model": language, "embeddings": embed.numel()}
    if head is not embed:
        out["lm_head"] = head.numel()
    return out


def prime_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """The optimizer as it is after step 1 of a run (its states exist), without running a whole step:
    zero gradients, one ``step()`` (which creates the states exactly as a real step does), no gradients."""
    with torch.no_grad():
        prime_grads(optimizer)
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _warm(optimizer: torch.optim.Optimizer, accumulated: bool) -> None:
    prime_optimizer(optimizer)
    if accumulated:
        prime_grads(optimizer)


def prime_grads(optimizer: torch.optim.Optimizer) -> None:
    """Gradients as a previous micro-batch of the same step leaves them (accumulated into, not allocated)."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            p.grad = torch.zeros_like(p)


# ------------------------------------------------------------------------------------------ inputs


def _text_token(config: Any) -> int:
    """An ordinary token id of ``config``'s vocabulary (none of the vision markers)."""
    special = {
        config.image_token_id,
        config.video_token_id,
        config.vision_start_token_id,
        config.vision_end_token_id,
    }
    token = config.text_config.vocab_size // 2
    while token in special:
        token += 1
    return token


def _video_sample(config: Any, frames: int, max_pixels: int, prompt: int, answer: int) -> Any:
    from paravt_core.sft.packing import Sample, mrope_position_ids

    v = config.vision_config
    TEXT_TOKEN = _text_token(config)
    grid = _grid(v, max_pixels)
    groups = max(1, frames // v.temporal_patch_size)
    pads = grid[0] * grid[1] // v.spatial_merge_size**2
    ids: list[int] = [TEXT_TOKEN] * prompt
    types: list[int] = [0] * prompt
    for _ in range(groups):
        ids += [TEXT_TOKEN] * TIMESTAMP_TOKENS + [config.vision_start_token_id]
        ids += [config.video_token_id] * pads + [config.vision_end_token_id]
        types += [0] * (TIMESTAMP_TOKENS + 1) + [2] * pads + [0]
    n_untrained = len(ids)
    ids += [TEXT_TOKEN] * answer
    types += [0] * answer
    input_ids = torch.tensor(ids)
    mm = torch.tensor(types)
    thw = torch.tensor([[groups, grid[0], grid[1]]])
    labels = input_ids.clone()
    labels[:n_untrained] = -100
    patch_dim = v.in_channels * v.temporal_patch_size * v.patch_size**2
    return Sample(
        input_ids=input_ids,
        labels=labels,
        mm_token_type_ids=mm,
        position_ids=mrope_position_ids(config, input_ids, mm, None, thw),
        pixel_values_videos=torch.empty(groups * grid[0] * grid[1], patch_dim),
        video_grid_thw=thw,
    )


def _grid(v: Any, max_pixels: int) -> tuple[int, int]:
    """Patch grid (h, w) of the largest square frame within ``max_pixels`` on the 32-px grid."""
    unit = v.patch_size * v.spatial_merge_size
    side = max(unit, int(math.isqrt(max_pixels)) // unit * unit)
    return side // v.patch_size, side // v.patch_size


def _text_sample(config: Any, length: int, trained: int) -> Any:
    from paravt_core.sft.packing import Sample

    ids = torch.full((length,), _text_token(config))
    labels = ids.clone()
    labels[: length - trained] = -100
    pos = torch.arange(length).view(1, -1).expand(3, -1).clone()
    return Sample(input_ids=ids, labels=labels, mm_token_type_ids=torch.zeros_like(ids), position_ids=pos)


def sft_pack(config: Any, cfg: Any, length: int) -> Any:
    """One packed sequence of exactly ``length`` tokens of video rows (see the module docstring)."""
    from paravt_core.sft.packing import pack

    m = cfg.media
    samples = []
    total = 0
    while True:
        s = _video_sample(
            config, m.video_max_frames, m.video_max_pixels, SFT_PROMPT_TOKENS, SFT_ANSWER_TOKENS
        )
        if total + len(s) > length:
            break
        samples.append(s)
        total += len(s)
    if length - total > 1:
        samples.append(_text_sample(config, length - total, min(SFT_ANSWER_TOKENS, length - total - 1)))
    return pack(samples)


# ------------------------------------------------------------------------------------------ SFT


def prepare_sft(config: Any, cfg: Any, pack_length: int, *, world: int) -> PreparedStep:
    """``paravt_core.sft.trainer.train``'s model set-up and one optimizer step. With ``grad_accum`` > 1 the
    measured micro-batch is the second one: the gradients of the first are already there (later micro-batches
    look the same), then clipping, AdamW and ``zero_grad`` as in the trainer."""
    from paravt_core.sft.packing import PackedLoss
    from paravt_core.sft.trainer import make_optimizer, make_scheduler
    from paravt_core.train.dist import Dist
    from paravt_core.train.fsdp import CoreOptions, assemble, grad_norm_and_clip

    d = Dist(rank=0, world=world, device=torch.device("cpu"), sharded=True)
    model = build_model(config, torch.float32)  # the trainer's float32 master weights
    from paravt_core.train.attention import set_implementation

    set_implementation(model, cfg.model.attn_implementation)
    opts = CoreOptions(  # as paravt_core.sft.trainer.train on a GPU
        freeze_vision=cfg.train.freeze_vision,
        mixed_precision=cfg.model.bf16,
        activation_checkpointing=cfg.model.gradient_checkpointing,
    )
    root = assemble(
        model, d, lambda m: PackedLoss(m, always_run_vision=True, chunk=cfg.train.logprob_chunk), opts
    )
    root.train()
    optimizer = make_optimizer(root, cfg)
    scheduler = make_scheduler(optimizer, cfg)
    accumulating = cfg.trainer.grad_accum > 1

    def one_step(seqs: list[Any]) -> None:  # the loop body of train(), without data feed and logging
        global_targets = float(sum(s.loss_tokens for s in seqs)) * world * cfg.trainer.grad_accum
        for seq in seqs:
            loss = root(seq.to(d.device))
            (loss * d.world / max(global_targets, 1.0)).backward()
        grad_norm_and_clip(root, cfg.trainer.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

    seqs = [sft_pack(config, cfg, pack_length)]
    m = cfg.media
    notes = [
        f"SFT pack: {pack_length} tokens of rows with one {m.video_max_frames}-frame video at "
        f"{m.video_max_pixels} px, {SFT_PROMPT_TOKENS} prompt + {SFT_ANSWER_TOKENS} trained answer tokens each; "
        f"{seqs[0].loss_tokens} trained tokens per pack",
        f"measured: micro-batch 2 of trainer.grad_accum={cfg.trainer.grad_accum} (gradients of the first already "
        "accumulated; later ones look the same), optimizer states from step 1 present",
        f"precision: float32 master weights, bf16 compute={cfg.model.bf16}, activation checkpointing="
        f"{cfg.model.gradient_checkpointing}, attention={cfg.model.attn_implementation}, vision tower frozen="
        f"{cfg.train.freeze_vision}, lm_head in blocks of {cfg.train.logprob_chunk} positions",
    ]
    return PreparedStep(
        root=root,
        optimizer=optimizer,
        warmup=lambda: _warm(optimizer, accumulating),
        step=lambda: one_step(seqs),
        notes=notes,
        tokens=seqs[0].tokens,
        trained_tokens=seqs[0].loss_tokens,
    )


# ------------------------------------------------------------------------------------------ RL


def _episode(config: Any, cfg: Any, length: int, index: int) -> Any:
    """A rollout ``Sample`` whose main trace is one episode of ``length`` tokens (see the module docstring)."""
    from paravt_core.agent.conversation import Conversation
    from paravt_core.agent.episode import EpisodeResult
    from paravt_core.agent.segments import Segment, SegmentKind
    from paravt_core.rewards.compose import RewardBreakdown
    from paravt_core.rl.data import RlPrompt
    from paravt_core.rl.rollout import Sample

    v = config.vision_config
    TEXT_TOKEN = _text_token(config)
    a = cfg.agent
    grid = _grid(v, a.max_pixels)
    frames = min(a.overview_frames, max(1, (length - RL_PROMPT_TOKENS) // 2 // (grid[0] * grid[1] // 4 + 8)))
    pads = grid[0] * grid[1] // v.spatial_merge_size**2
    ids = [TEXT_TOKEN] * (RL_PROMPT_TOKENS // 2)
    for _ in range(frames):
        ids += [TEXT_TOKEN] * TIMESTAMP_TOKENS + [config.vision_start_token_id]
        ids += [config.image_token_id] * pads + [config.vision_end_token_id]
    ids += [TEXT_TOKEN] * (RL_PROMPT_TOKENS - RL_PROMPT_TOKENS // 2)
    patch_dim = v.in_channels * v.temporal_patch_size * v.patch_size**2
    prompt = Segment(
        kind=SegmentKind.PROMPT,
        text="",
        token_ids=ids,
        loss_mask=[0] * len(ids),
        logprobs=[0.0] * len(ids),
        turn=0,
        images=[torch.empty(0)] * frames,
        pixel_values=torch.empty(frames * grid[0] * grid[1], patch_dim),
        image_grid_thw=torch.tensor([[1, grid[0], grid[1]]] * frames),
    )
    n = length - len(ids)
    generated = Segment(
        kind=SegmentKind.GENERATED,
        text="",
        token_ids=[TEXT_TOKEN] * n,
        loss_mask=[1] * n,
        logprobs=[-1.0] * n,
        turn=0,
    )
    conversation = Conversation(encoder=None)  # type: ignore[arg-type]  # segments are given, never encoded
    conversation.trace.append(prompt)
    conversation.trace.append(generated)
    episode = EpisodeResult(row_id=f"plan-{index}", video="", question="", finish_reason="answer")
    episode.conversation = conversation
    reward = RewardBreakdown(total=float(index % 2), accuracy=0.0, format=0.0, tool=0.0)
    rl_prompt = RlPrompt(row_id=f"plan-{index}", video="", question="", gold="", question_type="mcq")
    return Sample(
        prompt=rl_prompt,
        group=0,
        index=index,
        nframes=frames,
        policy_version=0,
        episode=episode,
        reward=reward,
    )


def rl_pack(config: Any, cfg: Any, length: int) -> Any:
    """The measured episode (:func:`_episode`) as the learner packs it (``rl.learner``'s trace -> pack)."""
    from paravt_core.rl.learner import pack_sample, trace_sequence
    from paravt_core.sft.packing import pack

    main = _episode(config, cfg, length, 0).episode.main
    seq = trace_sequence(main, config.image_token_id, getattr(config, "video_token_id", None))
    return pack([pack_sample(config, seq)])


def _second_pack(learner: Any, samples: list[Any]) -> None:
    """``learner.step(samples)`` as the second of several packs on this rank: a second pack finds the first
    one's gradients accumulated, so the gradients primed before the step are kept through the step's
    ``zero_grad`` (they also exist during the no-grad log-prob passes, which is at most their size early)."""
    optimizer = learner.optimizer
    optimizer.zero_grad = lambda set_to_none=True: None  # type: ignore[method-assign]
    try:
        learner.step(samples)
    finally:
        del optimizer.zero_grad  # the class's method again


def prepare_rl(config: Any, cfg: Any, pack_length: int, *, world: int) -> PreparedStep:
    """``paravt_core.rl.stage.run``'s learner set-up (policy and reference loaded in ``cfg.dtype``, the
    ``Learner`` shards the policy) and one ``Learner.step`` on a pack of ``pack_length`` tokens."""
    from paravt_core.rl.learner import Learner
    from paravt_core.train.dist import Dist
    from paravt_core.train.fsdp import CoreOptions

    dtype = getattr(torch, cfg.dtype)
    d = Dist(rank=0, world=world, device=torch.device("cpu"), sharded=True)
    opts = CoreOptions(  # as paravt_core.rl.stage.run on a GPU
        freeze_vision=cfg.train.freeze_vision,
        mixed_precision=dtype == torch.bfloat16,
        activation_checkpointing=cfg.train.activation_checkpointing,
    )
    policy = build_model(config, torch.float32 if opts.mixed_precision else dtype)
    reference = build_model(config, dtype)
    learner = Learner(
        policy,
        reference,
        temperature=cfg.agent.temperature,
        advantage=cfg.advantage,
        loss=cfg.loss,
        optim=cfg.optim,
        pack_tokens=cfg.pack_tokens,
        dist=d,
        opts=opts,
        logprob_chunk=cfg.train.logprob_chunk,
    )
    # the reference's shards (and buffers) live on the rank through the step, outside the policy's root
    reference = [
        t.to_local() if hasattr(t, "to_local") else t
        for t in [*learner.reference.parameters(), *learner.reference.buffers()]
    ]
    # One sequence: rank 0 owns it (sequence i goes to rank i mod world); the other ranks' passes are
    # padding passes of the same shapes.
    big = [_episode(config, cfg, pack_length, 0)]
    seq_tokens = len(big[0].episode.main)
    trained = sum(big[0].episode.main.loss_mask)
    notes = [
        f"RL pack: one episode of {seq_tokens} tokens: {big[0].nframes} overview frames at {cfg.agent.max_pixels} px, "
        f"{RL_PROMPT_TOKENS} prompt tokens, {trained} generated (trained) tokens",
        f"policy: float32 master weights, {cfg.dtype} compute (FSDP2 MixedPrecisionPolicy), AdamW states in float32;"
        f" reference: FSDP2-sharded in {cfg.dtype}; activation checkpointing="
        f"{cfg.train.activation_checkpointing}; vision tower frozen={cfg.train.freeze_vision}; lm_head in blocks of "
        f"{cfg.train.logprob_chunk} positions; pack_tokens={cfg.pack_tokens}",
        f"an episode longer than pack_tokens (up to agent.max_context_tokens={cfg.agent.max_context_tokens}) is "
        "refused and counted (skipped_too_long): no pass exceeds pack_tokens",
    ]
    return PreparedStep(
        root=learner.root,
        optimizer=learner.optimizer,
        warmup=lambda: _warm(learner.optimizer, True),
        step=lambda: _second_pack(learner, big),
        reference=reference,
        notes=notes,
        tokens=seq_tokens,
        trained_tokens=trained,
    )
