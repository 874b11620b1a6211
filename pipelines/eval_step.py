"""The eval step of every pipeline: fan out over (benchmark, shard), then merge each benchmark.

    eval_shards_op ─► ParallelFor(benchmark x shard): eval_op ─► ParallelFor(benchmarks): eval_merge_op

One flat loop over the pairs, not a loop over shards nested in a loop over benchmarks: kfp.local 2.17
resolves every input whose name ends in ``-loop-item`` to the innermost loop's item
(kfp/local/orchestrator/task_spec_utils.py, create_parameter_loop_iteration_task_spec), so inside a nested
loop the benchmark would read as the shard. The merges wait for the whole eval loop (a fan-in per benchmark
would need that nesting). ``shards`` 1 (the default) is the unsharded run: each eval task writes its
benchmark's results itself and the merge task only checks them complete.
"""

from __future__ import annotations

from typing import Any

from kfp import dsl

from components.eval import eval_merge_op, eval_op, eval_shards_op
from pipelines.platform import MEDIA_PVC_NAME, StagePlatform, StrOrChannel, configure_task

# The merge reads JSON Lines records and renders one report: no GPU. Media mounted because the merge loads
# the benchmark's rows the way the eval tasks do (their media_root must exist) to check every sample is there.
MERGE_PLATFORM = StagePlatform(cpu="2", memory="8G", timeout_seconds=2 * 3600)


def eval_step(
    *,
    benchmarks: Any,
    shards: Any,
    gpus: Any,
    media_pvc: StrOrChannel = MEDIA_PVC_NAME,
    after: tuple[dsl.PipelineTask, ...] = (),
    **inputs: Any,
) -> dsl.PipelineTask:
    """Add the eval step to the pipeline being defined; returns the merge task (inside its loop), whose
    ``Output`` is a benchmark's output URI: fan in with ``dsl.Collected(task.outputs["Output"])``.

    ``benchmarks``: list of names; ``shards``: shards per benchmark (an int pipeline parameter); ``gpus``:
    GPUs per eval task (a string parameter); ``after``: tasks the eval tasks wait for; ``inputs``: the
    config and location inputs ``eval_op`` and ``eval_merge_op`` share (``config_yaml``, ``overrides``,
    ``model``, ``output_prefix``, ``night``, ``run_id``, ``run_prefix``, ``train_run_id``)."""
    plan = eval_shards_op(benchmarks=benchmarks, shards=shards)
    configure_task(plan, "report", display_name="eval shards")
    with dsl.ParallelFor(plan.output, name="eval-shards") as item:
        ev = eval_op(benchmark=item.benchmark, shard=item.shard, gpus=gpus, **inputs)
        for task in after:
            ev.after(task)
        configure_task(ev, "eval", display_name="eval", gpus=gpus, media_pvc=media_pvc)
    with dsl.ParallelFor(benchmarks, name="eval-merge") as benchmark:
        merged = eval_merge_op(benchmark=benchmark, shards=shards, **inputs).after(ev)
        configure_task(
            merged, "eval", display_name="eval merge", media_pvc=media_pvc, platform=MERGE_PLATFORM
        )
    return merged
