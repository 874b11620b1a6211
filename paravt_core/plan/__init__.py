"""Capacity plan (``paravt plan``): per-rank memory of the real SFT / RL step measured on fake tensors, fit, time."""
