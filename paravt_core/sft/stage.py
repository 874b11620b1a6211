"""``paravt sft``: train, then write the HF checkpoint, metrics and the loss curve (DESIGN.md §3).

Outputs under ``cfg.output`` (local directory or ``s3://`` prefix)::

    config.yaml          the resolved config
    checkpoints/         resumable training checkpoints (see ``paravt_core/checkpoint.py``)
    final/               Hugging Face checkpoint (model + processor) + _COMPLETE; ``paravt_core.models.load``
    metrics.jsonl        one line per optimizer step: loss, lr, grad_norm, tokens, tokens_per_s,
                         padding_share, rows_used, rows_dropped, step_time_s
    metrics.json         summary: first/last loss, tokens/s, rows used, rows dropped by reason (counted per
                         visit: a row trained or dropped in two epochs counts twice); a run stopped by the
                         bad-row gate writes {"status": "failed", "error": ..., "gate": ..., counts} instead
    loss_curve.png       loss and learning rate per step
    _COMPLETE            written last

A rerun of a complete output with the same config returns the earlier result, one with a different config is
refused naming the differing keys (``stage.refuse_changed_config``), except more ``trainer.steps``, which
continue the run from its newest checkpoint; a rerun of an interrupted one resumes from there too.
"""

from __future__ import annotations

import json

from paravt_core import run_metrics, storage
from paravt_core.config import SftConfig
from paravt_core.sft import metrics
from paravt_core.sft.trainer import SftError, train
from paravt_core.stage import StageResult, StageRun, console, is_rank0

STAGE = "sft"


def _outputs(cfg: SftConfig) -> dict[str, str]:
    return {
        "final": storage.join(cfg.output, "final"),
        "checkpoints": storage.join(cfg.output, "checkpoints"),
        "metrics": storage.join(cfg.output, "metrics.json"),
        "metrics_jsonl": storage.join(cfg.output, "metrics.jsonl"),
        "loss_curve": storage.join(cfg.output, "loss_curve.png"),
    }


def run(cfg: SftConfig) -> StageResult:
    life = StageRun.open(STAGE, cfg.output, lead=is_rank0())
    if life.reusable(cfg, may_grow=("trainer.steps",)):
        summary = json.loads(storage.read_bytes(storage.join(cfg.output, "metrics.json")))
        return life.reused(_outputs(cfg), summary)
    if life.grown and life.lead:
        before = life.grown["trainer.steps"][0]
        console.print(
            f"paravt sft: {cfg.output} is complete at {before} steps; continuing to {cfg.trainer.steps} from "
            f"its newest checkpoint (steps 1-{before} followed the {before}-step learning-rate schedule)",
            highlight=False,
        )
    life.begin(cfg)
    try:
        result = train(cfg, log=console.print)
    except SftError as err:
        # A failed gate leaves its reason and counts where a finished run leaves its summary (no _COMPLETE).
        if life.lead:
            failed = {"status": "failed", "error": str(err), **err.metrics}
            storage.write_bytes(_outputs(cfg)["metrics"], json.dumps(failed, indent=2).encode())
        raise
    summary = metrics.summary(result.records, result.rows_used, result.dropped)
    summary["world_size"] = result.world
    summary["resumed_from"] = result.resumed_from
    if life.lead:
        out = _outputs(cfg)
        run_metrics.write_jsonl(out["metrics_jsonl"], result.records)
        storage.write_bytes(out["metrics"], json.dumps(summary, indent=2).encode())
        storage.write_bytes(out["loss_curve"], metrics.loss_curve_png(result.records))
    return life.done(_outputs(cfg), summary, steps=summary.get("steps", 0))
