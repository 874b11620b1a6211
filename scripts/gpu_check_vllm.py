"""``gpu_check``'s engine items on vLLM (``python scripts/gpu_check.py --engine vllm``): the same questions as
the SGLang items, asked of the vLLM server the stages launch (``engines/kinds/vllm.py``). On a GPU machine the
server runs on GPU 1 in bf16 beside the transformers side on GPU 0; on a CPU (``--tiny`` with vLLM's CPU
build, what ``make test`` runs: ``tests/contract/test_gpu_check_vllm.py``) both in float32. vLLM has no weight checksum
that sees every layer (``/weight_checker`` misses CPU linear layers), so every item reads the served weights
back as log-probs: a sample drawn by vLLM, scored by the RL learner's own forward (``PolicyLogprobs``) on the
same token ids and pixels, within ``tolerance`` (bf16: ``gpu_check.TOLERANCE``; float32: ``FLOAT32_TOLERANCE``).

 1. ``vllm_launch``: the stage's launch plan for the check's model (pixel budget, dtype), healthy in time;
 2. ``prompt_token_parity``: a 4-frame chat request; vLLM's prompt token ids equal ours id for id;
 3. ``greedy_parity``: vLLM's greedy reply equals the in-process transformers engine's, token for token
    (float32 only: bf16 kernels may part ways on near ties, and ``logprob_parity`` covers bf16);
 4. ``logprob_parity``: a reply sampled at T = 0.7 (top-k off): every drawn token's served log-prob equals the
    learner's; the same tokens under the perturbed weights differ by far more (a server that ignored the
    weights would pass otherwise);
 5. ``disk_push``: perturbed weights through ``DiskSync``: served log-probs are the perturbed model's, not the
    launch one's;
 6. ``learner_push``: a ``Learner`` (float32 masters, the tower frozen) pushed through the RL stage's own push
    (``rl.push.WeightPush`` over ``DiskSync``): served log-probs are the learner's weights' in the served dtype;
 7. ``group_push``: another ``Learner`` pushed over a process group (NCCL on GPUs, gloo on CPU) through the
    stage's own sync (``rl.push.make_sync``: ``NcclSync`` into our transfer backend behind vLLM's
    weight-transfer routes), bucket by bucket from the learner's gathers: served log-probs are its weights';
 8. ``rl_step``: one step of ``paravt rl`` with ``engine.kind=vllm``, the push over a process group and no
    ``engine.base_url`` (the stage launches the server; GPU: on GPU 1, the learner on GPU 0): the step trained,
    version 1 served, and the behaviour log-probs vLLM reported are the learner's (``behav_kl`` within the
    tolerance).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.gpu_check import MAX_PIXELS, MIN_PIXELS, TOLERANCE, Skip, logprob_gap  # noqa: E402

ITEMS = [
    "vllm_launch",
    "prompt_token_parity",
    "greedy_parity",
    "logprob_parity",
    "disk_push",
    "learner_push",
    "group_push",
    "rl_step",
]
NEEDS = {name: ["vllm_launch"] for name in ITEMS[1:-1]}
FLOAT32_TOLERANCE = 1e-4  # measured 4.8e-7 on the tiny model (tests/contract/test_vllm_engine.py)
TEMPERATURE = 0.7
REPLY_TOKENS = 8


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(engine: Any, call: Any) -> Any:
    async def go() -> Any:
        try:
            return await call
        finally:
            await engine.aclose()

    return asyncio.run(go())


class VllmChecks:
    """The checks on one launched server; ``cpu``: vLLM's CPU build, float32 (else GPU 1, bf16).
    ``python``: the interpreter with vLLM installed."""

    def __init__(self, work: Path, model_dir: str, data_dir: str, *, port: int, python: str, cpu: bool):
        self.work, self.model_dir, self.data_dir, self.port, self.python = (
            work,
            model_dir,
            data_dir,
            port,
            python,
        )
        self.cpu = cpu
        self.dtype = "float32" if cpu else "bfloat16"
        self.device = "cpu" if cpu else "cuda:0"
        self.tolerance = FLOAT32_TOLERANCE if cpu else TOLERANCE
        self.engine: Any = None
        self.local: Any = None
        self._perturbed: dict[int, Any] = {}
        self.group_port = _free_port()  # the push over a process group: its rendezvous
        work.mkdir(parents=True, exist_ok=True)

    def engine_config(self) -> Any:
        """The stage's engine section for this machine (what ``rl_step`` passes as overrides too)."""
        from pydantic import TypeAdapter

        from paravt_core.engines.registry import engine_config

        return TypeAdapter(engine_config("rl")).validate_python({"kind": "vllm", **self._launch_fields()})

    def _launch_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"python": self.python, "port": self.port, "max_model_len": 4096,
                                  "weight_sync": "distributed", "nccl_port": self.group_port}  # fmt: skip
        if self.cpu:
            return {**fields, "enforce_eager": True, "cpu_kvcache_gib": 1, "max_images": 8}
        return {**fields, "gpus": [1]}

    # -- the check's request and its scoring ----------------------------------------------------------------
    def request(self, temperature: float = 0.0, seed: int | None = None) -> Any:
        """Four 224x224 random frames and a question, as a chat request that also carries our prompt ids and
        the processor's pixels (the in-process engine reads those)."""
        import numpy as np
        import torch

        from paravt_core.engines.base import GenerationRequest, SamplingParams, image_processor_kwargs

        rng = np.random.default_rng(0)
        frames = [torch.from_numpy(rng.integers(0, 256, (3, 224, 224), dtype=np.uint8)) for _ in range(4)]
        parts = [{"type": "image", "image": f} for f in frames] + [{"type": "text", "text": "What happens?"}]
        messages = [{"role": "user", "content": parts}]
        budget = image_processor_kwargs(max_pixels=MAX_PIXELS, min_pixels=MIN_PIXELS)
        processor = self.local.processor
        text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        encoded = processor(text=[text], images=frames, return_tensors="pt", **budget)
        return GenerationRequest(
            input_ids=encoded["input_ids"][0].tolist(), images=frames, messages=messages, images_kwargs=budget,
            pixel_values=encoded["pixel_values"], image_grid_thw=encoded["image_grid_thw"],
            sampling=SamplingParams(temperature=temperature, max_new_tokens=REPLY_TOKENS, seed=seed),
        )  # fmt: skip

    def sample(self) -> tuple[Any, list[int], list[float]]:
        """(request, drawn token ids, their served log-probs) of one reply vLLM samples at ``TEMPERATURE``."""
        request = self.request(TEMPERATURE, seed=7)
        completion = _run(self.engine, self.engine.generate([request]))[0]
        if not completion.exact_tokens or not completion.logprobs:
            raise AssertionError("vLLM returned no token ids or log-probs for the sampled reply")
        return request, list(completion.token_ids), list(completion.logprobs)

    def scores(self, model: Any, request: Any, drawn: list[int]) -> list[float]:
        """The drawn tokens' log-probs under ``model`` at ``TEMPERATURE``, through the learner's forward."""
        import torch

        from paravt_core.rl.learner import PolicyLogprobs, TrainSequence, device_logprobs, pack_sample
        from paravt_core.sft.packing import pack

        ids = torch.tensor(request.input_ids + drawn)
        seq = TrainSequence(
            input_ids=ids, loss_mask=torch.tensor([0.0] * len(request.input_ids) + [1.0] * len(drawn)),
            behav_logp=torch.zeros(len(ids)), mm_token_type_ids=(ids == model.config.image_token_id).long(),
            pixel_values=request.pixel_values, image_grid_thw=request.image_grid_thw,
        )  # fmt: skip
        with torch.no_grad():
            full = device_logprobs(PolicyLogprobs(model), pack([pack_sample(model.config, seq)]), TEMPERATURE)
        return full.cpu()[seq.loss_mask > 0].float().tolist()

    def perturbed(self, seed: int = 1) -> Any:
        """The check's model with every weight moved (seeded): what the pushes send (made once per seed; read,
        never trained)."""
        if seed not in self._perturbed:
            self._perturbed[seed] = self._moved(seed)
        return self._perturbed[seed]

    def _moved(self, seed: int) -> Any:
        import torch

        from paravt_core.models import load

        moved = load(self.model_dir, device=self.device, dtype=self.dtype)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in moved.model.parameters():
                p.add_((torch.randn(p.shape, generator=generator) * 0.05).to(p.device, p.dtype))
        return moved

    def served_as(self, model: Any, unlike: Any | None = None) -> str:
        """The served weights are ``model``'s (a fresh sample, within the tolerance) and, when given, not
        ``unlike``'s (by more than 10 x the tolerance)."""
        request, drawn, served = self.sample()
        detail = logprob_gap(served, self.scores(model, request, drawn), self.tolerance)
        if unlike is not None:
            other = self.scores(unlike, request, drawn)
            apart = max(abs(a - b) for a, b in zip(served, other, strict=True))
            if apart <= 10 * self.tolerance:
                raise AssertionError(f"the other weights' log-probs are only {apart:.4g} away: no evidence")
            detail += f"; other weights {apart:.3f} away"
        return detail

    # -- items ----------------------------------------------------------------------------------------------
    def vllm_launch(self) -> str:
        import os

        import torch

        from paravt_core.engines.kinds.base import BuildContext
        from paravt_core.engines.registry import build
        from paravt_core.models import load

        if not self.cpu and torch.cuda.device_count() < 2:
            raise RuntimeError(f"needs 2 GPUs, found {torch.cuda.device_count()}")
        self.local = load(self.model_dir, device=self.device, dtype=self.dtype)
        env = None if self.cpu else {**os.environ, "CUDA_VISIBLE_DEVICES": "1"}
        context = BuildContext(stage="rl", model=self.model_dir, processor=self.local.processor, dtype=self.dtype,
                               pixels=(MIN_PIXELS, MAX_PIXELS), env=env,
                               log_path=str(self.work / "vllm-server.log"))  # fmt: skip
        self.engine = build(self.engine_config(), context)
        return " ".join(self.engine.server.command)

    def prompt_token_parity(self) -> str:
        request = self.request()
        _run(self.engine, self.engine.generate([request]))
        checked, wrong = self.engine.prompt_ids_checked, self.engine.prompt_id_mismatches
        if checked < 1 or wrong:
            raise AssertionError(f"{wrong} of {checked} requests' prompt ids differ from ours (or none came)")
        return f"{len(request.input_ids)} prompt ids, 4 images: vLLM's equal ours"

    def greedy_parity(self) -> str:
        from paravt_core.engines.transformers_engine import TransformersEngine

        if not self.cpu:
            raise Skip(
                "bf16: greedy replies may part on near ties between kernels (logprob_parity checks bf16)"
            )
        request = self.request()
        served = _run(self.engine, self.engine.generate([request]))[0].token_ids
        local = TransformersEngine(self.local.model, self.local.processor)
        ours = _run(local, local.generate([request]))[0].token_ids
        if list(served) != list(ours):
            raise AssertionError(
                f"vLLM's greedy tokens {list(served)} != the in-process engine's {list(ours)}"
            )
        return f"{len(ours)} greedy tokens equal"

    def logprob_parity(self) -> str:
        return "launch weights: " + self.served_as(self.local.model, unlike=self.perturbed().model)

    def disk_push(self) -> str:
        from paravt_core.rl.weight_sync import DiskSync

        moved = self.perturbed()
        DiskSync(self.engine, moved.model, str(self.work / "staging")).push(moved.model.state_dict(), 1)
        return "pushed weights: " + self.served_as(moved.model, unlike=self.local.model)

    def learner(self, seed: int) -> Any:
        """A ``Learner`` as the RL stage makes one: float32 masters of weights moved by ``seed`` (other weights
        than the server holds), the vision tower frozen."""
        import dataclasses

        import torch

        from paravt_core.models import load
        from paravt_core.rl.config import RlConfig
        from paravt_core.rl.learner import Learner
        from paravt_core.train.dist import Dist

        cfg = RlConfig()
        learner = Learner(
            self._moved(seed).model.float(),
            load(self.model_dir, device=self.device, dtype=getattr(torch, self.dtype)).model,
            temperature=cfg.agent.temperature, advantage=cfg.advantage, loss=cfg.loss, optim=cfg.optim,
            dist=dataclasses.replace(Dist(), device=torch.device(self.device)),
        )  # fmt: skip
        if not learner.frozen_names():
            raise AssertionError("the learner froze no tensor")
        return learner

    def learners_weights_served(self, learner: Any, served: Any) -> str:
        from paravt_core.models import load

        expected = load(self.model_dir, device=self.device, dtype=self.dtype)
        expected.model.load_state_dict(learner.weights(served))
        return "the learner's weights: " + self.served_as(expected.model, unlike=self.perturbed().model)

    def learner_push(self) -> str:
        import torch

        from paravt_core.rl.push import WeightPush
        from paravt_core.rl.weight_sync import DiskSync

        served = getattr(torch, self.dtype)
        learner = self.learner(seed=2)
        sync = DiskSync(self.engine, learner.model, str(self.work / "staging"), dtype=served)
        WeightPush(learner.dist, learner, sync, served).push(2)
        return self.learners_weights_served(learner, served)

    def group_push(self) -> str:
        import torch

        from paravt_core.rl.push import WeightPush, make_sync, streams

        served = getattr(torch, self.dtype)
        learner = self.learner(seed=3)
        config = self.engine_config()
        sync = make_sync(config, self.engine, learner.model, str(self.work / "staging"), served)
        push = WeightPush(learner.dist, learner, sync, served, streams=streams(config),
                          bucket_bytes=config.bucket_mb << 20)  # fmt: skip
        try:
            push.push(3)
            buckets = len(sync.pushed_buckets)
            return (
                f"{type(sync).__name__} ({sync.backend}), {buckets} bucket(s); "
                + self.learners_weights_served(learner, served)
            )
        finally:
            sync.close()  # the server leaves the group; it keeps serving

    def rl_step(self) -> str:
        self.stop_server()  # the stage launches its own
        output = self.work / "rl"
        overrides = [f"engine={json.dumps({'kind': 'vllm', **self._launch_fields()})}"]
        overrides += [f"model={self.model_dir}", f"data={self.data_dir}", f"output={output}", "steps=1",
                      f"dtype={self.dtype}", f"device={self.device}", "checkpoint.every=1",
                      f"agent.max_pixels={MAX_PIXELS}", f"agent.min_pixels={MIN_PIXELS}"]  # fmt: skip
        command = [sys.executable, "-m", "paravt_core.cli", "rl", "--config",
                   str(ROOT / "configs" / "rl" / "tiny.yaml"), *overrides]  # fmt: skip
        subprocess.run(command, check=True, cwd=ROOT)
        steps = [json.loads(x) for x in (output / "metrics.jsonl").read_text().splitlines()]
        last = steps[-1] if steps else {}
        if not last.get("trained_sequences") or last.get("policy_version") != 1:
            raise AssertionError(f"the step did not train: {json.dumps(last)[:300]}")
        if abs(last["behav_kl"]) > self.tolerance:
            raise AssertionError(f"behav_kl {last['behav_kl']:.3g}: vLLM's log-probs are not the learner's")
        return f"1 step, {last['trained_sequences']:g} sequences trained, behav_kl {last['behav_kl']:.2g}"

    def stop_server(self) -> None:
        if self.engine is not None and self.engine.server is not None:
            self.engine.server.stop()
            self.engine = None
