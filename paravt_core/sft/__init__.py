"""Cold-start SFT of Qwen3-VL on ParaVT rows (``paravt sft``; outputs and layout in ``stage.py``).

Modules:
  inputs      one row -> ``Sample`` (real processor, exact frames with true timestamps, exact label mask)
  packing     ``Sample``; ``pack(samples) -> PackedBatch`` (per-sample M-RoPE ids, no cross-sample
              attention); ``token_losses(model, batch)`` (summed CE over targets, one vision pass);
              ``PackedLoss`` (the module to shard with FSDP2); the greedy first-fit ``Packer``
  data        the parquet rows as a deterministic, resumable stream for DataLoader worker processes
  trainer     the loop: AdamW, warmup + cosine, clipping, accumulation, bf16, FSDP2 under torchrun
  metrics     metrics.json / loss_curve.png
Shared with the RL stage: ``paravt_core.checkpoint`` (torch.distributed.checkpoint checkpoints, N ranks ->
M ranks, and the final HF checkpoint) and ``paravt_core.run_metrics`` (metrics.jsonl, PNG curves).
  stage       ``run(cfg) -> StageResult``
"""
