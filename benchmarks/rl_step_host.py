"""One RL learner step, before and after issue 32's host-read change (commit 76a24ce), side by side.

- before: ``tests/support/rl_step_reference.py``: the step as it was, log-probs back one sample at a time, a Python
  float per micro-batch's loss and statistic, a float norm (the equality test pins that both give the same
  numbers);
- after: ``paravt_core.rl.learner.Learner.step``: log-probs back in one copy, losses and statistics summed on
  the device and read once with the norm.

The tiny Qwen3-VL and the synthetic data on the CPU (float32), the rollout's 8 samples, one sequence per
forward pass (8 passes). The two sides alternate step by step (taking turns at going first) on two learners loaded from the same
weights, so a busy machine slows both alike; printed: the median wall time and main-thread CPU time per step, the reads
per step (``paravt_core.train.syncs.HostReads``) and the after / before ratios. On a CPU a read costs no wait
(the values are already on the host): this measures the host work the change added or removed, not the GPU
wait it removes. Usage: ``OMP_NUM_THREADS=1 python benchmarks/rl_step_host.py [steps]``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from paravt_core.models import build_tiny_model, load  # noqa: E402
from paravt_core.rl.learner import Learner, trace_sequence  # noqa: E402
from paravt_core.synth import synthesize  # noqa: E402
from paravt_core.train.syncs import HostReads  # noqa: E402
from tests.support.rl_step_reference import reference_step  # noqa: E402
from tests.support.rl_support import rollout_samples, run_data_stage, tiny_learner, tiny_rl_config  # noqa: E402


def _samples(tmp: Path) -> tuple:
    data = run_data_stage(synthesize(str(tmp / "synth"), videos=4, seconds=8, seed=0), tmp)
    model_dir = build_tiny_model(str(tmp / "model"), seed=0)
    cfg = tiny_rl_config(data, model_dir, str(tmp / "unused"))
    return cfg, model_dir, rollout_samples(cfg, model_dir, data)


def main(steps: int = 7) -> None:
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        cfg, model_dir, samples = _samples(Path(tmp))
        config = load(model_dir).config
        pack_tokens = max(
            len(trace_sequence(s.episode.main, config.image_token_id, None)) for s in samples if s.trainable
        )

        sides = {
            "before": (tiny_learner(cfg, model_dir, pack_tokens), reference_step),
            "after": (tiny_learner(cfg, model_dir, pack_tokens), Learner.step),
        }
        roots = (str(ROOT / "paravt_core" / "rl"), str(ROOT / "paravt_core" / "train"), str(ROOT / "tests"))
        wall: dict[str, list[float]] = {k: [] for k in sides}
        cpu: dict[str, list[float]] = {k: [] for k in sides}
        reads: dict[str, int] = {}
        passes = 0.0
        for name, (lrn, step) in sides.items():  # step 0: warm-up, reads counted, not timed
            with HostReads(roots) as counter:
                passes = step(lrn, samples)["forward_passes"]
            reads[name] = counter.total
        for i in range(steps):  # timed without the counting mode (it intercepts every torch call)
            for name in sorted(sides, reverse=i % 2 == 1):  # alternate which side goes first
                lrn, step = sides[name]
                w0, c0 = time.perf_counter(), time.thread_time()
                step(lrn, samples)
                wall[name].append(time.perf_counter() - w0)
                cpu[name].append(time.thread_time() - c0)
    print(
        f"tiny Qwen3-VL on CPU, float32, {len(samples)} samples, {passes:.0f} forward passes; {steps} steps"
    )
    print(f"{'':8}{'wall s/step (median, min)':>27}{'cpu s/step (median, min)':>27}{'reads/step':>12}")
    for name in ("before", "after"):
        w, c = wall[name], cpu[name]
        print(
            f"{name:8}{statistics.median(w):19.3f}{min(w):8.3f}{statistics.median(c):19.3f}{min(c):8.3f}"
            f"{reads[name]:12d}"
        )
    for label, of in (("median", statistics.median), ("min", min)):
        ratio_w = of(wall["after"]) / of(wall["before"])
        ratio_c = of(cpu["after"]) / of(cpu["before"])
        print(f"after / before ({label}): wall {ratio_w:.3f}, cpu {ratio_c:.3f}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
