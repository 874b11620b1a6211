"""A random-initialized Qwen3-VL with Qwen3-VL-2B's shapes: the model of the GPU checks and profiles
(``benchmarks/sft_gpu_check.py build``, ``scripts/gpu_profile.py``) and the shapes the FLOP counts are tested at."""

from __future__ import annotations

import tempfile

# Qwen/Qwen3-VL-2B-Instruct's published shapes as we read them from its config.json; pass --config-from on a
# machine with hub access to use the hub's config instead.
QWEN3VL_2B_TEXT = {
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 262144,
    "rms_norm_eps": 1e-6,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 5_000_000.0,
        "mrope_section": [24, 20, 20],
        "mrope_interleaved": True,
    },
}
QWEN3VL_2B_VISION = {
    "depth": 24,
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_heads": 16,
    "out_hidden_size": 2048,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "num_position_embeddings": 2304,
    "deepstack_visual_indexes": [5, 11, 17],
}


def build(out: str, config_from: str | None) -> None:
    """Write a Qwen3-VL with random weights and Qwen3-VL-2B's shapes (or ``config_from``'s hub config) to ``out``,
    with the tiny model's tokenizer and processor (patch 16 / merge 2 like Qwen3-VL); nothing is downloaded."""
    import torch
    from transformers import AutoConfig, AutoProcessor, Qwen3VLConfig, Qwen3VLForConditionalGeneration

    from paravt_core.models import build_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        build_tiny_model(tmp)
        processor = AutoProcessor.from_pretrained(tmp)
    tok = processor.tokenizer
    ids = {
        t: tok.convert_tokens_to_ids(t)
        for t in ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")
    }
    if config_from:
        config = AutoConfig.from_pretrained(config_from)
    else:
        config = Qwen3VLConfig(
            text_config=QWEN3VL_2B_TEXT, vision_config=QWEN3VL_2B_VISION, tie_word_embeddings=True
        )
    # the tiny tokenizer's ids for the media tokens (all below the 151936-entry vocabulary)
    config.image_token_id, config.video_token_id = ids["<|image_pad|>"], ids["<|video_pad|>"]
    config.vision_start_token_id, config.vision_end_token_id = ids["<|vision_start|>"], ids["<|vision_end|>"]
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):  # random init of 2 B: seconds on a GPU
        model = Qwen3VLForConditionalGeneration(config).to(torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(out)
    processor.save_pretrained(out)
    print(f"{out}: random Qwen3-VL, {params / 1e9:.2f} B parameters (bf16)")
