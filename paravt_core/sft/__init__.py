"""Cold-start SFT of Qwen3-VL on ParaVT rows (``paravt sft``).

Modules:
  inputs    one row -> ``Sample`` (real processor, exact frames with true timestamps, exact label mask)
  packing   ``Sample``, ``pack(samples) -> PackedBatch`` (per-sample M-RoPE ids, no cross-sample
            attention), ``token_losses(model, batch)``, the greedy first-fit ``Packer``
"""
