"""Probe (planaudit, unfinished): which aten ops reach RealIndices during get_total_norm in fake mode; run with PYTHONPATH=$PWD from the repo root."""

import collections
import sys
import tempfile

import torch

sys.path.insert(0, "benchmarks")
import plan_layer_growth as g

import paravt_core.train.fsdp as f
from paravt_core.config import SftConfig, load_config
from paravt_core.plan import fake, memory, steps

md = g.build_tiny_model(tempfile.mkdtemp(), seed=0)
cfg = load_config(SftConfig, g.SFT_8B, g.OVERRIDES)
seen = collections.Counter()
on = [False]
orig = fake.RealIndices.__torch_dispatch__


def logd(self, func, types, args=(), kwargs=None):
    out = orig(self, func, types, args, kwargs)
    if on[0]:
        seen[str(func)] += 1
    return out


fake.RealIndices.__torch_dispatch__ = logd


def norm_only(root, max_norm):
    ps = [p for p in root.parameters() if p.grad is not None]
    on[0] = True
    torch.nn.utils.get_total_norm([p.grad for p in ps])
    on[0] = False
    return 0.0


f.grad_norm_and_clip = norm_only
m = memory.measure(steps.prepare_sft, 2, g.medium_config(md, 2), cfg, 256)
for k, v in seen.most_common(15):
    print(v, k)
