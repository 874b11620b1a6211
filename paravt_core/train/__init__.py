"""One training core for SFT and RL (``paravt_core.sft.trainer`` and ``paravt_core.rl.learner`` both use it).

- ``dist``: process-group setup with a configurable timeout, rank helpers, the followers' store wait.
- ``fsdp``: loading within host memory (meta-device init, rank 0 reads the checkpoint once and broadcasts),
  the frozen-module rule (vision tower frozen by default), activation checkpointing, FSDP2 sharding with a
  bf16 ``MixedPrecisionPolicy`` over float32 master weights, AdamW parameter groups, gradient clipping.
- ``logprobs``: target log-probs in chunks over positions (no full-vocabulary float32 logits).
- Checkpoint / resume: ``paravt_core.checkpoint`` (DCP), shared by both stages.
"""
