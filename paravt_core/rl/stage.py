"""``paravt rl``: PARA-GRPO from the SFT checkpoint on the data stage's RL prompts (docs/method.md §5).

One step: the next ``prompts_per_step`` prompts (a seeded permutation per epoch) -> a group of
``group_size`` episodes each through the real episode loop on the rollout engine (concurrent; coalesced
into batched generate calls for the in-process engine, one request per episode turn for SGLang) -> PARA-GRPO rewards -> the learner step (prox / reference log-probs,
advantages, decoupled PPO loss, one AdamW step) -> the new weights pushed to the rollout engine (policy
version + 1). Every ``checkpoint.every`` steps (and at the end) a checkpoint is written; a rerun of the
same command resumes from the newest complete one and reproduces the uninterrupted run step for step
(sampling seeds depend only on the seed and the step). Every check that can refuse (the engine settings, the
checkpoint's reference model, compared by resolved location, the data, loading the models) runs before the
output is touched: a refused rerun of a finished run leaves it finished. The end result is a Hugging Face
checkpoint at ``<output>/final``.

Outputs: ``metrics.jsonl`` (one line per step), ``metrics.json`` (last step + totals), ``curves.png``,
``trajectories/step_XXXXXXXX.jsonl`` (a few sampled episodes per step), ``checkpoints/``, ``final/``,
``config.yaml``, then ``_COMPLETE``.

Multi-process: ``torchrun --nproc-per-node N -m paravt_core.cli rl ...`` shards the learner with FSDP2 (see
``learner.py``). Rank 0 runs the rollouts (engine, judge, data) and writes every output; it hands each
step's samples to the other ranks through the process group's store (``train.dist.LeadHandoff``: they wait
there, outside any collective, up to ``train.follower_wait_s``; the bytes sent are ``handoff_bytes`` in the
metrics), and every rank trains on its share; after the step the full weights are gathered on
rank 0 and pushed to its engine. Checkpoints are collective and resume on any number of ranks.

Rollout engine (``engine.kind``, built by ``engines.registry``): the in-process transformers engine, a vLLM
server (``engine.base_url``, or launched for ``model``; disk pushes: ``engines/vllm_engine.py``), or an SGLang
server (``engine.base_url``, or launched for ``model`` on a GPU machine). A launched server runs on
``engine.gpus`` when set, never on a GPU of the learner's, and under torchrun only there (see
``server_placement``); its log is ``<output>-server.log``. SGLang receives every new version from disk or over NCCL
(``weight_sync.py``), or a fleet of SGLang servers behind ``sglang-router`` (``engine.servers`` > 1,
``engines/fleet.py``): every push goes to each server from disk, each one's version is checked before the
next step's rollouts, and the router's per-server counters go into the step's metrics (``fleet_*``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import tempfile
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from paravt_core import checkpoint, faults, storage
from paravt_core.config import ConfigError
from paravt_core.engines.base import EngineError, image_processor_kwargs
from paravt_core.engines.coalesce import CoalescingEngine
from paravt_core.engines.independent import IndependentEngine
from paravt_core.engines.registry import KINDS
from paravt_core.rewards.terms import terms_text
from paravt_core.rl.config import RlConfig
from paravt_core.run_metrics import write_jsonl
from paravt_core.stage import StageResult, StageRun, console, is_rank0, same_location
from paravt_core.tracking import Tracker
from paravt_core.tracking.progress import StepProgress, is_terminal, rl_numbers
from paravt_core.tracking.scalars import rl_scalars, trajectory_markdown
from paravt_core.train.dist import Dist, LeadHandoff, setup_distributed
from paravt_core.train.fsdp import CoreOptions

from .data import RlDataset, RlPrompt, load_prompts
from .handoff import compact, restore
from .learner import Learner, state_checksum
from .metrics import curves_png, final_summary, step_metrics, trajectory_lines
from .push import WeightPush, make_sync, streams
from .rollout import NO_SAMPLE_REASONS, StepRollouts, arollout_step
from .weight_sync import NcclSync, _closing

STAGE = "rl"
ENGINE_FAILURES = ("engine_error", "engine_refused", "engine_timeout")  # the rollout engine, not the episode


def prompts_for_step(prompts: list[RlPrompt], step: int, per_step: int, seed: int) -> list[RlPrompt]:
    """Prompts of ``step``: positions [step * per_step, (step + 1) * per_step) of the endless sequence of
    per-epoch permutations (epoch e shuffled with seed (seed, e)). Depends only on its arguments."""
    n = len(prompts)
    out = []
    for pos in range(step * per_step, (step + 1) * per_step):
        epoch, at = divmod(pos, n)
        order = np.random.default_rng([seed, epoch]).permutation(n)
        out.append(prompts[int(order[at])])
    return out


def sampling_seed(seed: int, step: int) -> int:
    """Base of the step's per-batch sampling seeds (see ``CoalescingEngine``)."""
    return (seed * 1_000_003 + step * 10_007) % (2**31)


def _judge(cfg: RlConfig) -> Any:
    if cfg.paravt.reward.mode != "llm":
        return None
    from paravt_core.rewards.judge import Judge

    j = cfg.paravt.reward.judge
    return Judge.from_env(
        timeout_s=j.timeout_s, max_retries=j.max_retries, backoff_s=j.backoff_s, deadline_s=j.deadline_s
    )


def _broadcast(d: Dist, obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank."""
    if not d.sharded:
        return obj
    import torch.distributed as dist

    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def processor_pixels(cfg: RlConfig) -> tuple[int, int] | None:
    """The pixel budget of the episode encoder, the followers' restore and a launched server alike: the frame
    path's (None: the checkpoint's own processor settings)."""
    return cfg.agent.frames.processor_pixels(cfg.agent)


def restore_images_kwargs(cfg: RlConfig) -> dict[str, Any]:
    """The image processor settings the followers rebuild rank 0's frames with: the episode encoder's budget
    (:func:`processor_pixels`), the one the launched server gets as ``--mm-process-config`` too."""
    if (pixels := processor_pixels(cfg)) is None:
        return {}  # as the encoder: the processor's own settings
    lo, hi = pixels
    return image_processor_kwargs(max_pixels=hi, min_pixels=lo)


def _local_gpus(d: Dist, device: str, environ: dict[str, str]) -> set[int]:
    """This node's GPUs (node indices) the learner's processes use: every local rank's under torchrun, else
    ``device``'s; through ``CUDA_VISIBLE_DEVICES`` when it is set."""
    visible = [int(x) for x in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if x.strip().isdigit()]
    if d.sharded:
        indices = list(range(int(environ.get("LOCAL_WORLD_SIZE", d.world))))
    elif device.startswith("cuda"):
        indices = [int(device.partition(":")[2] or 0)]
    else:
        return set()
    return {visible[i] if i < len(visible) else i for i in indices}


def server_placement(cfg: RlConfig, d: Dist, environ: dict[str, str] | None = None) -> dict[str, str] | None:
    """``CUDA_VISIBLE_DEVICES`` for the server (SGLang or vLLM) the stage starts itself (no
    ``engine.base_url``), or None (not pinned: one process, no ``engine.gpus``). Under torchrun that server
    would inherit learner rank 0's GPU, so it needs ``engine.gpus``, and they must be GPUs no learner process
    of this node uses."""
    e = cfg.engine
    if KINDS[e.kind].in_process or e.base_url or getattr(e, "fleet", False):
        return None
    environ = dict(os.environ if environ is None else environ)
    if not e.gpus:
        if d.sharded:
            raise ConfigError(
                f"engine.kind={e.kind} without engine.base_url under torchrun: the server would start on learner "
                "rank 0's GPU; set engine.gpus to GPUs no learner rank uses, or run the stage through "
                "`python -m paravt_core.rl.launch`"
            )
        return None
    shared = sorted(set(e.gpus) & _local_gpus(d, str(d.device) if d.sharded else cfg.device, environ))
    if shared:
        raise ConfigError(
            f"engine.gpus {list(e.gpus)}: GPU(s) {shared} are the learner's; give the server others"
        )
    return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, e.gpus))}


def _check_engine(cfg: RlConfig, d: Dist) -> None:
    """The rollout engine's settings that can be refused without starting anything."""
    e = cfg.engine
    if KINDS[e.kind].in_process:
        device = str(d.device) if d.sharded else cfg.device
        if e.device and e.device != device:
            raise ConfigError(
                f"engine.device={e.device}: the in-process engine shares the learner's {device}"
            )
        if e.dtype is not None and e.dtype != cfg.dtype:
            raise ConfigError(
                f"engine.dtype={e.dtype}: the engine serves the run's weights, dtype={cfg.dtype}"
            )
        if not e.coalesce:
            raise ConfigError(
                "engine.coalesce=false: the in-process rollout engine batches the episodes' turns"
            )
        return
    if e.kind == "sglang" and e.fleet:
        if not e.base_url:
            raise ConfigError(
                "engine.servers > 1: run the stage through `python -m paravt_core.rl.launch` (it starts the "
                "servers and the router), or give engine.base_url of a running router"
            )
        if e.weight_sync != "disk":
            raise ConfigError("a rollout fleet takes weight pushes from disk: engine.weight_sync=disk")
    server_placement(cfg, d)
    if not streams(e):
        staging = e.staging_dir or cfg.output.rstrip("/") + "-weights"
        if storage.is_s3(staging):
            raise ConfigError(f"engine.staging_dir must be a directory the server can read, not {staging}")


def _check_resume(cfg: RlConfig, reference_uri: str) -> None:
    """A checkpoint to resume from was trained against the same reference model (read before anything)."""
    resumed = checkpoint.latest_complete(cfg.output)
    if not resumed:
        return
    state = json.loads(storage.read_bytes(storage.join(resumed, "trainer.json")))
    if not same_location(str(state.get("reference_model")), reference_uri):
        raise ConfigError(
            f"checkpoint {resumed} was trained against reference {state.get('reference_model')!r}, "
            f"not {reference_uri!r}"
        )


def _rollout_engine(cfg: RlConfig, policy: Any, device: str, dtype: Any, d: Dist) -> tuple[Any, Any]:
    """(rank 0's rollout engine, the weight sync that pushes the learner's weights to it); ``run`` has
    checked the engine's settings (``_check_engine``) before anything was touched."""
    from paravt_core.engines.registry import BuildContext, build

    e = cfg.engine
    pinned = server_placement(cfg, d)  # engine.gpus, off the learner's GPUs (None: not pinned)
    context = BuildContext(
        stage=STAGE,
        model=cfg.model,
        purpose="rollout engine",
        # the in-process engine loads its own copy; a server's client uses the policy's processor
        processor=None if KINDS[e.kind].in_process else policy.processor,
        device=device,
        dtype=cfg.dtype,  # the served weights' dtype: the in-process copy and a launched server
        pixels=processor_pixels(cfg),  # a launched server makes the encoder's pixels
        env={**os.environ, **pinned} if pinned is not None else None,
        log_path=cfg.output.rstrip("/") + "-server.log" if not storage.is_s3(cfg.output) else None,
    )
    inner = build(e, context)
    staging = getattr(e, "staging_dir", "") or cfg.output.rstrip("/") + "-weights"
    return inner, make_sync(e, inner, policy.model, staging, dtype)


def fleet_step(engine: Any, seen: dict[str, Any]) -> dict[str, Any]:
    """A rollout fleet's counters over the last step (requests answered and failed per server, the router's
    retries, ours); ``seen`` keeps the totals between calls. Empty for other engines."""
    inner = getattr(engine, "inner", None)
    if inner is None or not hasattr(inner, "counters"):
        return {}
    from paravt_core.engines.fleet import counter_delta

    now = asyncio.run(_closing(inner, inner.counters()))
    delta = counter_delta(seen, now)
    seen.clear()
    seen.update(now)
    return {f"fleet_{k}": v for k, v in delta.items()}


@dataclasses.dataclass
class _Run:
    """One RL run's parts, built by ``run``; each part of a step is a method, and ``run`` is the loop that
    calls them in order (rollout -> handoff + learn -> push -> record -> checkpoint), the way torchtitan's
    train loop reads. ``engine`` and ``sync`` exist on rank 0 only."""

    cfg: RlConfig
    d: Dist
    learner: Learner
    policy: Any
    data: RlDataset
    judge: Any
    engine: Any
    pusher: WeightPush  # the pushes to the engine (its sync on rank 0)
    handoff: LeadHandoff
    images_kwargs: dict[str, Any]
    staging: str
    reference_uri: str
    pool: ThreadPoolExecutor
    dtype: Any  # the served weights' dtype: every push and the final are written in it
    history: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    totals: Counter = dataclasses.field(default_factory=Counter)
    # the fleet's counters at the last step (for per-step differences)
    fleet_seen: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Bounded staleness: rollouts of steps [step, queued) already submitted to ``pool``
    ahead: deque[Future[StepRollouts]] = dataclasses.field(default_factory=deque)
    queued: int = 0
    # TensorBoard / MLflow / W&B (rank 0; paravt_core/tracking) and the pod-log lines (None: a terminal)
    tracker: Tracker = dataclasses.field(default_factory=Tracker.disabled)
    lines: StepProgress | None = None
    tracking_state: dict[str, Any] = dataclasses.field(default_factory=dict)  # the resumed checkpoint's

    @property
    def lead(self) -> bool:
        return self.d.rank == 0

    def resume(self) -> int:
        """Restore the newest complete checkpoint (collective) and push its weights; the first step to run."""
        resumed = checkpoint.latest_complete(self.cfg.output)
        if not resumed:
            e = self.cfg.engine
            if not KINDS[e.kind].in_process and (e.base_url or streams(e)):
                # a long-lived server may serve another run's (possibly half-pushed) weights: ours first
                self.pusher.push(0)
                if self.lead:
                    console.print("rl: pushed the starting weights (version 0) before any rollout")
            return 0
        state = checkpoint.load(resumed, self.learner.root, self.learner.optimizer, staging_root=self.staging)
        if not same_location(str(state.get("reference_model")), self.reference_uri):
            raise ConfigError(
                f"checkpoint {resumed} was trained against reference {state.get('reference_model')!r}, "
                f"not {self.reference_uri!r}"
            )
        start, self.history = int(state["step"]), list(state["history"])
        self.tracking_state = dict(state.get("tracking") or {})
        self.pusher.push(int(state["policy_version"]))
        if self.lead:
            console.print(
                f"rl: resumed from {resumed} (step {start}, policy version {self.pusher.version})",
                soft_wrap=True,
            )
        return start

    def rollout(self, step: int) -> StepRollouts:
        """Step ``step``'s episodes on the rollout engine (rank 0; may run in the worker thread)."""
        cfg = self.cfg
        self.engine.reseed(sampling_seed(cfg.seed, step))
        prompts = prompts_for_step(self.data.prompts, step, cfg.prompts_per_step, cfg.seed)
        return asyncio.run(
            arollout_step(
                prompts,
                self.engine,
                cfg.agent,
                cfg.paravt,
                group_size=cfg.group_size,
                version=self.pusher.version,
                judge=self.judge,
            )
        )

    def next_rollouts(self, step: int) -> StepRollouts:
        """Step ``step``'s rollouts: produced now, or (``max_staleness`` = s > 0) taken from the queue that
        keeps the next s steps' rollouts running in the worker thread while the learner trains; each new
        weight version is pushed to the engine between its generate calls. A sample is trained at most s
        versions after the version it started under; the decoupled loss uses the behaviour log-probs
        recorded at sampling."""
        cfg = self.cfg
        if cfg.max_staleness == 0:
            self.pusher.verify()  # a fleet: every server serves the pushed version, else no rollouts
            return self.rollout(step)
        while self.queued <= min(step + cfg.max_staleness, cfg.steps - 1):
            self.ahead.append(self.pool.submit(self.rollout, self.queued))
            self.queued += 1
        return self.ahead.popleft().result()

    def staleness(self, step: int, rollouts: StepRollouts, version: int) -> list[int]:
        """Each sample's age in versions; refuses a step whose every episode failed in the engine."""
        samples = rollouts.samples
        failed = [s for s in samples if s.episode.finish_reason in ENGINE_FAILURES]
        if len(failed) == len(samples):
            raise EngineError(
                f"rl step {step}: the rollout engine failed every episode ({failed[0].episode.error})"
            )
        staleness = [version - s.policy_version for s in samples]
        if max(staleness) > self.cfg.max_staleness:  # the queue depth makes this impossible: guard it
            raise RuntimeError(
                f"rl step {step}: a sample is {max(staleness)} versions old (bound {self.cfg.max_staleness})"
            )
        return staleness

    def learn(self, step: int, samples: list[Any] | None) -> dict[str, Any]:
        """Hand the step's samples to the other ranks (rank 0: frames as uint8, no pixels; the others wait
        on the store, outside any collective) and train every rank on its share."""
        if self.lead:
            self.handoff.share(step, compact(samples))
            return self.learner.step(samples)
        return self.learner.step(
            restore(self.handoff.share(step, None), self.policy.processor, self.images_kwargs)
        )

    def record(
        self,
        step: int,
        rollouts: StepRollouts,
        learned: dict[str, Any],
        staleness: list[int],
        sync_s: float,
    ) -> None:
        """The step's metrics line, console line and sampled trajectories (rank 0)."""
        cfg, out, samples = self.cfg, self.cfg.output, rollouts.samples
        fleet = fleet_step(self.engine, self.fleet_seen)
        self.totals.update(rollouts.counts)
        self.totals.update(f"finish:{s.episode.finish_reason}" for s in samples)
        extra = {
            "policy_version": self.pusher.version,
            "staleness_max": max(staleness),
            "staleness_mean": float(np.mean(staleness)),
            "untrained_samples": sum(s.episode.finish_reason in NO_SAMPLE_REASONS for s in samples),
            "rollout_s": rollouts.seconds,
            "sync_s": sync_s,
            "handoff_bytes": self.handoff.bytes_sent,  # step payload to the other ranks (all of them)
            "engine_batches": self.engine.batches,
            "counts": dict(rollouts.counts),
            **fleet,
            **(self.judge.counters() if self.judge is not None else {}),
        }
        metrics = step_metrics(step, samples, learned, extra)
        self.history.append(metrics)
        self.tracker.log(step + 1, rl_scalars(metrics))  # steps counted from 1, as the console does
        if self.lines is not None:  # pod logs: a plain line every log_every steps, at most one a minute
            self.lines.update(step + 1, rl_numbers(metrics))
        else:
            console.print(
                f"rl step {step + 1}/{cfg.steps}: reward {metrics['reward_mean']:.3f} "
                f"({terms_text(metrics)}) loss {metrics.get('loss', 0.0):.3g} "
                f"rollout {rollouts.seconds:.1f}s learner {metrics.get('learner_s', 0.0):.1f}s",
                soft_wrap=True,
            )
        lines = trajectory_lines(step, samples, cfg.trajectories_per_step, cfg.seed)
        every = cfg.tracking.text_every
        if lines and every and (step + 1) % every == 0:  # one rendered trajectory in TensorBoard's text tab
            self.tracker.text(step + 1, "rollout/trajectory", trajectory_markdown(json.loads(lines[0])))
        storage.write_bytes(
            storage.join(out, "trajectories", f"step_{step:08d}.jsonl"),
            "".join(x + "\n" for x in lines).encode(),
        )
        write_jsonl(storage.join(out, "metrics.jsonl"), self.history)

    def save_checkpoint(self, done: int, weights: dict[str, Any] | None) -> None:
        """Every ``checkpoint.every`` steps and at the end (collective); rank 0 adds the trainer state (the
        served weights' checksum when asked: from ``weights`` when the push gathered them whole, else one
        tensor at a time)."""
        cfg = self.cfg
        if done % cfg.checkpoint.every != 0 and done != cfg.steps:
            return
        checksum = None
        if cfg.checkpoint.weights_checksum:
            checksum = (
                state_checksum(weights) if weights is not None else self.learner.weights_checksum(self.dtype)
            )
        self.tracker.checkpoint()  # the events up to this step are on the output before the checkpoint is
        state = (
            {
                "step": done,
                "policy_version": self.pusher.version,
                "reference_model": self.reference_uri,
                "model": cfg.model,
                "data_position": done * cfg.prompts_per_step,
                "history": self.history,
                "weights_sha256": checksum,
                "tracking": self.tracker.state(),  # the tracker runs a resumed run continues (MLflow run id)
            }
            if self.lead
            else {}
        )
        checkpoint.save(
            cfg.output,
            done,
            self.learner.root,
            self.learner.optimizer,
            state,
            staging_root=self.staging,
            keep_last=cfg.checkpoint.keep_last,
        )

    def step(self, step: int) -> None:
        """One RL step on this rank."""
        if not self.lead:  # the other ranks: rank 0's samples (store wait, no collective) -> their share
            self.learn(step, None)
            weights, _ = self.pusher.push(step + 1)
            self.save_checkpoint(step + 1, weights)
            return
        rollouts = self.next_rollouts(step)
        version = self.pusher.version
        staleness = self.staleness(step, rollouts, version)
        learned = self.learn(step, rollouts.samples)
        weights, sync_s = self.pusher.push(version + 1)
        self.record(step, rollouts, learned, staleness, sync_s)
        self.save_checkpoint(step + 1, weights)
        faults.check(STAGE, step + 1)  # resilience tests: fail here once, like a preempted pod

    def finish(self, final: str, life: StageRun) -> StageResult:
        """Rank 0: the run's summary, curves and ``_COMPLETE``."""
        cfg, out, history, data = self.cfg, self.cfg.output, self.history, self.data
        write_jsonl(storage.join(out, "metrics.jsonl"), history)
        storage.write_bytes(storage.join(out, "curves.png"), curves_png(history))
        summary = {
            "steps": len(history),
            "prompts": len(data.prompts),
            "skipped_rows": dict(data.skipped),
            "reward_first": history[0]["reward_mean"] if history else None,
            "reward_last": history[-1]["reward_mean"] if history else None,
            "policy_version": self.pusher.version,
            "counts": dict(self.totals),
            "last_step": history[-1] if history else None,
            **final_summary(history, cfg.final_steps),  # f_tau / kappa of the ablation table, f_tau curve
        }
        storage.write_bytes(storage.join(out, "metrics.json"), json.dumps(summary, indent=2).encode())
        metrics = {k: v for k, v in summary.items() if k not in SUMMARY_ONLY}
        return life.done(_outputs(out, final), metrics, steps=len(history))


def _tracker(cfg: RlConfig, start: int, state: dict[str, Any], staging: str) -> Tracker:
    """Rank 0's tracker, continuing the runs of the checkpoint resumed from (``start`` steps done)."""
    from paravt_core.config import config_to_dict

    return Tracker.open(
        cfg.tracking,
        stage=STAGE,
        output=cfg.output,
        work_dir=os.path.join(staging, "tracking"),
        resume_step=start,
        last_step=cfg.steps,
        state=state,
        config=config_to_dict(cfg),
    )


def _announce_data(data: RlDataset, d: Dist) -> None:
    console.print(
        f"rl: {len(data.prompts)} prompts from {len(data.files)} file(s), "
        + (
            f"{sum(data.skipped.values())} rows skipped ("
            + ", ".join(f"{k}={v}" for k, v in sorted(data.skipped.items()))
            + ")"
            if data.skipped
            else "no row skipped"
        )
        + (f", learner sharded over {d.world} ranks" if d.sharded else "")
    )


def _learner(cfg: RlConfig, d: Dist, dtype: Any, reference_uri: str) -> tuple[Learner, Any]:
    """The learner (policy + reference, sharded under torchrun) and the policy's model handle."""
    import torch

    opts = CoreOptions(
        freeze_vision=cfg.train.freeze_vision,
        # bf16 on a GPU: float32 master weights, bf16 compute, float32 reductions
        mixed_precision=dtype == torch.bfloat16 and d.device.type == "cuda",
        activation_checkpointing=cfg.train.activation_checkpointing,
        compile_layers=cfg.train.compile_layers,
    )
    learner, policy = Learner.from_uris(
        cfg.model,
        reference_uri,
        d,
        opts,
        dtype=dtype,
        logprob_chunk=cfg.train.logprob_chunk,
        attn_implementation=cfg.attn_implementation,
        sdpa_backend=cfg.sdpa_backend,
        temperature=cfg.agent.temperature,
        advantage=cfg.advantage,
        loss=cfg.loss,
        optim=cfg.optim,
        pack_tokens=cfg.pack_tokens,
    )
    if policy.model is None:  # rank 0 of torchrun: the weights live in the shards
        policy = dataclasses.replace(policy, model=learner.model)
    return learner, policy


SUMMARY_ONLY = ("last_step", "f_tau_curve", "format_reward_curve")  # in metrics.json, not in StageResult


def _outputs(out: str, final: str) -> dict[str, str]:
    return {
        "final": final,
        "metrics": storage.join(out, "metrics.jsonl"),
        "checkpoints": storage.join(out, checkpoint.CHECKPOINTS),
    }


def _reused(cfg: RlConfig) -> StageResult:
    """A complete output made with this config: said in one line, its summary returned, nothing loaded."""
    summary = json.loads(storage.read_bytes(storage.join(cfg.output, "metrics.json")))
    metrics = {k: v for k, v in summary.items() if k not in SUMMARY_ONLY}
    life = StageRun(STAGE, cfg.output, lead=is_rank0(), complete=True, console=console)
    return life.reused(_outputs(cfg.output, storage.join(cfg.output, checkpoint.FINAL)), metrics)


def run(cfg: RlConfig) -> StageResult:
    life = StageRun.open(STAGE, cfg.output, lead=is_rank0())
    if life.reusable(cfg, may_grow=("steps",)):  # more steps continue the run
        return _reused(cfg)
    import torch

    d = setup_distributed(cfg.train.dist_timeout_s)
    lead = life.lead = d.rank == 0  # the process group's rank from here on (RANK's under torchrun)
    out = cfg.output
    reference_uri = cfg.reference_model or cfg.model
    # every check that can refuse runs before the output is touched: a refused rerun of a finished run
    # leaves it finished (its _COMPLETE and config.yaml as they were)
    _check_engine(cfg, d)
    _check_resume(cfg, reference_uri)
    judge = _judge(cfg) if lead else None
    data = load_prompts(cfg.data)
    if not data.prompts:
        raise FileNotFoundError(f"{cfg.data}: no usable RL prompt (skipped: {dict(data.skipped)})")
    if lead:
        _announce_data(data, d)

    torch.manual_seed(cfg.seed)
    dtype = getattr(torch, cfg.dtype)
    device = str(d.device) if d.sharded else cfg.device
    if not d.sharded:
        d = dataclasses.replace(d, device=torch.device(device))
    learner, policy = _learner(cfg, d, dtype, reference_uri)
    engine: Any = None
    sync: Any = None
    if lead:  # the rollout engine lives on rank 0 only
        inner, sync = _rollout_engine(cfg, policy, device, dtype, d)
        if isinstance(sync, NcclSync):  # the frozen tower goes over with the first push only
            sync.static = learner.frozen_names()
        # in-process engine: episodes' turns coalesced into lock-step batches; a server batches continuously,
        # so every episode turn goes to it on its own (engines/independent.py)
        engine = (
            CoalescingEngine(inner, seed=cfg.seed)
            if KINDS[cfg.engine.kind].in_process
            else IndependentEngine(inner, max_concurrency=cfg.engine.max_concurrency, seed=cfg.seed)
        )
    pusher = WeightPush(
        d,
        learner,
        sync,
        dtype,
        streams=streams(cfg.engine),
        bucket_bytes=getattr(cfg.engine, "bucket_mb", 1024) << 20,
    )
    life.begin(cfg)  # everything is loaded and started: from here on the output is rewritten (rank 0)
    r = _Run(
        cfg=cfg,
        d=d,
        learner=learner,
        policy=policy,
        data=data,
        judge=judge,
        engine=engine,
        pusher=pusher,
        handoff=LeadHandoff(d, cfg.train.follower_wait_s),
        images_kwargs=restore_images_kwargs(cfg),
        staging=tempfile.mkdtemp(prefix="paravt-rl-"),
        reference_uri=reference_uri,
        pool=ThreadPoolExecutor(max_workers=1, thread_name_prefix="paravt-rollout"),
        dtype=dtype,
    )
    try:
        start = r.queued = r.resume()
        if lead:
            r.tracker = _tracker(cfg, start, r.tracking_state, r.staging)
            r.lines = (
                None
                if is_terminal()
                else StepProgress(
                    STAGE, cfg.steps, start, cfg.tracking.log_every, cfg.tracking.progress_every_s
                )
            )
        for step in range(start, cfg.steps):
            r.step(step)
        final = checkpoint.save_final(
            out, learner.root, policy.processor, staging_root=r.staging, dtype=dtype, submodule="inner"
        )
        r.tracker.close(final)  # before the staging directory (an s3:// output's local event files) goes
    except BaseException:
        r.tracker.checkpoint()  # what was logged is on the output; a resumed run drops uncheckpointed steps
        raise
    finally:
        r.pool.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(r.staging, ignore_errors=True)
        pusher.close()  # the server leaves this run's weight-update group; one this run launched stops
    if not lead:
        return StageResult(STAGE, outputs={"final": final}, metrics={"rank": d.rank})
    return r.finish(final, life)
