"""PARA-GRPO training: ``gating`` (per-prompt overview frame budget), ``advantages`` and ``loss`` (pure
tensor math, no I/O), and the RL stage built on them."""
