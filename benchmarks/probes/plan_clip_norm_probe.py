"""Probe (planaudit, unfinished): fake-mode FSDPMemTracker peak with grad_norm_and_clip reduced to get_total_norm; run with PYTHONPATH=$PWD from the repo root."""

import sys
import tempfile

import torch

sys.path.insert(0, "benchmarks")
import plan_layer_growth as g

import paravt_core.train.fsdp as f
from paravt_core.config import SftConfig, load_config
from paravt_core.plan import memory, steps

md = g.build_tiny_model(tempfile.mkdtemp(), seed=0)
cfg = load_config(SftConfig, g.SFT_8B, g.OVERRIDES)


def norm_only(root, max_norm):
    ps = [p for p in root.parameters() if p.grad is not None]
    torch.nn.utils.get_total_norm([p.grad for p in ps])
    return 0.0


f.grad_norm_and_clip = norm_only
m = memory.measure(steps.prepare_sft, 2, g.medium_config(md, 6), cfg, 1024)
print("norm_only", {k: round(v / 2**30, 4) for k, v in m.tracker.items() if v})
