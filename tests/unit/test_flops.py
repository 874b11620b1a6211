"""The model-FLOPs rule of MFU (``paravt_core/train/flops.py``), checked three ways:

- at Qwen3-VL-2B's shapes (``paravt_bench/qwen3vl_2b.py``'s, on the meta device): the linear weights the
  formula assumes are the model's own, part by part, and one step's count is worked out here by hand from
  the config's integers; against it the older 6 x parameters rule over-counts by 1.14x on this pack;
- on two samples of known lengths: the causal attention term, query by query;
- on a real training step of a small Qwen3-VL on the CPU: ``torch.utils.flop_counter`` sees exactly the
  linear / convolution FLOPs the rule counts as hardware FLOPs (recompute included), frozen tower or not,
  checkpointing or not. The counter does not see CPU attention kernels, so attention is subtracted there and
  checked by hand instead.
"""

from __future__ import annotations

import pytest
import torch

from paravt_bench.qwen3vl_2b import QWEN3VL_2B_TEXT, QWEN3VL_2B_VISION
from paravt_core.plan.report import Utilisation, timed
from paravt_core.tracking.scalars import mfu, mfu_6n
from paravt_core.train.flops import PackFacts, Shapes, StepFlops, model_shapes, pack_facts, pack_flops


def _config_2b():  # noqa: ANN202
    from transformers import Qwen3VLConfig

    return Qwen3VLConfig(
        text_config=QWEN3VL_2B_TEXT, vision_config=QWEN3VL_2B_VISION, tie_word_embeddings=True
    )


def _linear_weights(model: torch.nn.Module) -> dict[str, int]:
    """Weights of every Linear / Conv3d of the model, summed per part (biases left out, as the rule does)."""
    out: dict[str, int] = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear | torch.nn.Conv3d):
            if ".layers." in name:
                part = "decoder"
            elif ".blocks." in name:
                part = "vision_blocks"
            elif "deepstack_merger_list" in name:
                part = "deepstack_mergers"
            else:
                part = name.rsplit(".", 1)[0].removeprefix("model.visual.")  # lm_head, patch_embed, merger
            out[part] = out.get(part, 0) + module.weight.numel()
    return out


def test_the_rule_assumes_the_2b_models_own_linear_weights() -> None:
    from paravt_core.plan.steps import build_model

    config = _config_2b()
    with torch.device("meta"):
        model = build_model(config, torch.bfloat16)
    got = _linear_weights(model)
    # from the config's integers: hidden 2048, intermediate 6144, 28 layers, 16 heads, 8 KV heads of 128;
    # vision: depth 24, hidden 1024, intermediate 4096, merge 2 (4 x 1024 = 4096 wide), out 2048, 3 deepstack
    q_o = 2 * 2048 * 16 * 128
    k_v = 2 * 2048 * 8 * 128
    mlp = 3 * 2048 * 6144
    assert got["decoder"] == 28 * (q_o + k_v + mlp) == 1_409_286_144
    assert got["lm_head"] == 2048 * 151936  # tied to the embedding: the same weight, the same matmul
    assert got["vision_blocks"] == 24 * (1024 * 3 * 1024 + 1024 * 1024 + 2 * 1024 * 4096)
    assert got["patch_embed"] == (3 * 2 * 16 * 16) * 1024
    assert got["merger"] == 4096 * 4096 + 4096 * 2048
    assert got["deepstack_mergers"] == 3 * (4096 * 4096 + 4096 * 2048)
    assert set(got) == {"decoder", "lm_head", "vision_blocks", "patch_embed", "merger", "deepstack_mergers"}
    s = model_shapes(config)
    assert (s.layers, s.deepstack, s.patch_in, s.merge) == (28, 3, 1536, 2)


# The plan's SFT pack at 8192 tokens (plan/steps.py sft_pack, the recipe's media): two rows of one
# 64-frame video at 224 x 224 px (32 frame groups of 14 x 14 = 196 patches; 32 x (6 + 1 + 49 + 1) = 1824
# tokens) + 256 prompt + 1024 answer tokens = 3104 each, then a 1984-token text row with 1024 trained.
PACK = PackFacts(lengths=(3104, 3104, 1984), loss_tokens=3 * 1024, groups=(196,) * 64)


def test_a_2b_step_worked_by_hand() -> None:
    s = model_shapes(_config_2b())
    tokens, patches, merged = 8192, 64 * 196, 64 * 196 // 4
    decoder = 6 * 28 * (2048 * 128 * (2 * 16 + 2 * 8) + 3 * 2048 * 6144) * tokens  # fwd + bwd
    # per sample L (L + 1) / 2 causal pairs; QK^T and AV each 16 heads x 128 per pair; 2 FLOPs per MAC
    pairs = 3104 * 3105 // 2 + 3104 * 3105 // 2 + 1984 * 1985 // 2
    attention = 3 * 28 * 2 * 2 * 16 * 128 * pairs
    head = 6 * 2048 * 151936 * 3072  # only the 3072 positions with a target
    blocks = 2 * 24 * (4 * 1024 * 1024 + 2 * 1024 * 4096) * patches + 2 * 24 * 2 * 1024 * 64 * 196**2
    vision = blocks + 2 * 1536 * 1024 * patches + 2 * 4 * (4096 * 4096 + 4096 * 2048) * merged  # forward only
    flops = pack_flops(s, PACK, vision_trained=False, checkpointing=True)
    assert flops.model == decoder + attention + head + vision
    assert flops.model / tokens == pytest.approx(11.167e9, rel=1e-4)  # GFLOP per token
    # recompute: each decoder layer's forward but its down projection, attention forward, lm_head forward
    recompute = (decoder / 3 - 2 * 28 * 2048 * 6144 * tokens) + attention / 3 + head / 3
    assert flops.recompute == recompute and flops.hardware == flops.model + recompute
    assert flops.forward == (decoder + attention + head) / 3 + vision
    # the 6N rule: 6 x 2,127,532,032 parameters x tokens, 1.143 x the model's FLOPs on this pack
    six_n = 6 * 2_127_532_032 * tokens
    assert six_n / flops.model == pytest.approx(1.1431, rel=1e-4)
    # the logged figures, same step time and peak: their ratio is that of the FLOPs
    seconds, peak = 2.0, 989.0
    ratio = mfu(flops.model, seconds, 1, peak) / mfu_6n(tokens / seconds, 2_127_532_032, 1, peak)
    assert ratio == pytest.approx(flops.model / six_n, rel=1e-12)


def test_a_trained_tower_without_checkpointing_by_hand() -> None:
    s = model_shapes(_config_2b())
    patches, merged = 64 * 196, 64 * 196 // 4
    blocks = 2 * 24 * (4 * 1024 * 1024 + 2 * 1024 * 4096) * patches + 2 * 24 * 2 * 1024 * 64 * 196**2
    embed, mergers = 2 * 1536 * 1024 * patches, 2 * 4 * (4096 * 4096 + 4096 * 2048) * merged
    frozen = pack_flops(s, PACK, vision_trained=False, checkpointing=False)
    trained = pack_flops(s, PACK, vision_trained=True, checkpointing=False)
    # blocks and mergers fwd + bwd; the patch embedding's input (pixels) needs no gradient: weight grad only
    assert trained.model - frozen.model == 2 * (blocks + mergers) + embed
    assert frozen.recompute == trained.recompute == 2 * 2048 * 151936 * 3072  # lm_head's chunks only


def test_causal_attention_of_two_samples_query_by_query() -> None:
    # 1 layer, 2 query heads of 4 (1 KV head), hidden 8; no MLP; vocab 10; no vision
    s = Shapes(hidden=8, intermediate=0, heads=2, kv_heads=1, head_dim=4, layers=1, vocab=10,
               vision_depth=0, vision_hidden=0, vision_intermediate=0, vision_out=0, merge=2, patch_in=0,
               deepstack=0)  # fmt: skip
    facts = PackFacts(lengths=(3, 5), loss_tokens=6)
    # query i of a sample sees keys 0..i of that sample only: 1+2+3 and 1+2+3+4+5 = 6 + 15 = 21 pairs
    pairs = sum(i + 1 for n in facts.lengths for i in range(n))
    assert pairs == 21
    attention_fwd = 2 * (2 * 4) * pairs * 2  # QK^T + AV, 2 heads x 4 per pair, 2 FLOPs per MAC: 672
    linear_fwd = 2 * 8 * 4 * (2 * 2 + 2 * 1) * 8 + 2 * 8 * 10 * 6  # q, k, v, o on 8 tokens; head on 6
    flops = pack_flops(s, facts, checkpointing=False)
    assert attention_fwd == 672
    assert flops.forward == attention_fwd + linear_fwd
    assert flops.model == 3 * (attention_fwd + linear_fwd)
    # one sample of 8 tokens instead: 36 pairs, each sample never attends to the other
    together = pack_flops(s, PackFacts(lengths=(8,), loss_tokens=6), checkpointing=False)
    assert together.forward - flops.forward == 2 * (2 * 4) * (36 - 21) * 2


def test_vision_attention_of_two_groups_by_hand() -> None:
    s = Shapes(hidden=8, intermediate=0, heads=2, kv_heads=1, head_dim=4, layers=0, vocab=0,
               vision_depth=2, vision_hidden=6, vision_intermediate=0, vision_out=0, merge=1, patch_in=0,
               deepstack=0)  # fmt: skip
    facts = PackFacts(lengths=(4,), loss_tokens=0, groups=(3, 2))  # an image of 3 patches, a frame group of 2
    # bidirectional inside each group: 9 + 4 query-key pairs, QK^T + AV over 6 channels, 2 blocks
    attention = 2 * 2 * 6 * (3 * 3 + 2 * 2) * 2
    linear = 2 * 2 * (4 * 6 * 6) * 5  # qkv + proj: 4 x 6 x 6 weights per block, 5 patches
    merger = 2 * (6 * 6 + 6 * 0) * 5  # the final merger on 5 merged tokens (merge 1): fc1 6 -> 6, fc2 6 -> 0
    assert pack_flops(s, facts).model == attention + linear + merger  # frozen: forward only, no recompute


def test_the_plan_divides_hardware_flops_by_the_hardware_utilisation() -> None:
    flops = StepFlops(model=100.0, recompute=30.0)
    measured = Utilisation(mfu=0.05, hfu=0.065, source="measured")
    assert timed(flops, measured) == (0.065, 130.0 / 0.065)
    assumed = Utilisation(mfu=0.40, hfu=None, source="assumed")  # an MFU only: its HFU at this recompute
    hfu, flop_s = timed(flops, assumed)
    assert hfu == pytest.approx(0.40 * 1.3) and flop_s == pytest.approx(100.0 / 0.40)


def test_the_plan_counts_its_own_pack_with_the_rule() -> None:
    from paravt_core.config import SftConfig, load_config
    from paravt_core.plan.report import sft_flops

    cfg = load_config(SftConfig, "configs/sft/qwen3vl_8b.yaml", [])
    one, tokens = sft_flops(_config_2b(), cfg, 8192)
    assert tokens == 8192 and one == pack_flops(model_shapes(_config_2b()), PACK)


# ------------------------------------------------------------------------------ a real step on the CPU

SMALL_TEXT = {"vocab_size": 151936, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
              "rope_parameters": {"rope_type": "default", "rope_theta": 5e6, "mrope_section": [4, 2, 2],
                                  "mrope_interleaved": True}}  # fmt: skip
SMALL_VISION = {"depth": 2, "hidden_size": 32, "intermediate_size": 48, "num_heads": 2, "patch_size": 16,
                "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 64,
                "num_position_embeddings": 256, "deepstack_visual_indexes": [0]}  # fmt: skip
LINEAR_OPS = {"mm", "addmm", "convolution", "convolution_backward"}


@pytest.mark.parametrize(("checkpointing", "vision_trained"), [(True, False), (False, False), (True, True)])
def test_the_counted_flops_are_what_a_real_step_runs(checkpointing: bool, vision_trained: bool) -> None:
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    from paravt_core.plan import steps
    from paravt_core.sft.packing import PackedLoss, pack
    from paravt_core.train.attention import set_implementation
    from paravt_core.train.fsdp import CoreOptions, prepare

    config = Qwen3VLConfig(text_config=SMALL_TEXT, vision_config=SMALL_VISION, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = Qwen3VLForConditionalGeneration(config)
    opts = CoreOptions(freeze_vision=not vision_trained, activation_checkpointing=checkpointing)
    prepare(model, opts, trainable=True)  # the trainers' freezing and checkpointing
    set_implementation(model, "packed_sdpa")
    root = PackedLoss(model, chunk=16)  # lm_head in chunks of 16 of the 32 trained positions
    video = steps._video_sample(config, 4, 64 * 64, 10, 20)  # 2 frame groups of 4 x 4 patches
    video.pixel_values_videos = torch.randn_like(video.pixel_values_videos)
    batch = pack([video, steps._text_sample(config, 30, 12)])
    facts = pack_facts(batch)
    assert facts == PackFacts(lengths=(54, 30), loss_tokens=32, groups=(16, 16))

    with FlopCounterMode(display=False) as counter:
        root(batch).backward()
    counts = {op.__name__: n for op, n in counter.get_flop_counts()["Global"].items()}
    assert set(counts) <= LINEAR_OPS | {"bmm"}  # bmm: attention, when a kernel decomposes it

    s = model_shapes(config)
    flops = pack_flops(s, facts, vision_trained=vision_trained, checkpointing=checkpointing)
    # attention by hand (CPU attention kernels are not seen by the counter): forward MACs x 2 FLOPs x passes
    text_passes = 1 + 2 + (1 if checkpointing else 0)
    vision_passes = (3 + (1 if checkpointing else 0)) if vision_trained else 1
    text_attention = 2 * 2 * 2 * 4 * 16 * (54 * 55 // 2 + 30 * 31 // 2) * text_passes
    vision_attention = 2 * 2 * 2 * 32 * (16 * 16 + 16 * 16) * vision_passes
    linear = sum(n for op, n in counts.items() if op in LINEAR_OPS)
    assert linear == flops.hardware - text_attention - vision_attention
