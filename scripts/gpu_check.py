"""The GPU checklist as one command (``make gpu-check``): what this project's CPU machines cannot run.

Needs 2 GPUs (the NCCL push cannot put two ranks of one group on one GPU; the others need one) and the RL
image's Python (``sglang==0.5.23``). On a random-initialized Qwen3-VL-shaped model (Qwen3-VL-2B's shapes,
``benchmarks/sft_gpu_check.py build``; nothing downloaded) and synthetic data through the data stage. Every
item is built so that a wrong server makes it FAIL (``tests/contract/test_gpu_check.py`` feeds each one such a
server): the server's weights are read back as SGLang's own checksums (``POST /weights_checker``
``{"action": "checksum"}``, answered with ``per_engine_checksum``), and parity is a bounded difference of the
log-probs both sides give one fixed continuation, never "the greedy outputs happen to agree".

 1. ``sglang_launch``: our launch command (``--mm-process-config`` with the agent's pixel budget) on GPU 1,
    pinned with ``CUDA_VISIBLE_DEVICES``, healthy within the timeout; the launch weights' checksum is kept;
 2. ``prompt_token_parity``: a 4-frame image request (224x224 frames) - the server's ``prompt_tokens`` equals
    our expanded prompt length (it made the same image tokens as our processor);
 3. ``logprob_parity``: a fixed continuation (the transformers engine's greedy tokens on the launch weights)
    scored on SGLang (``input_token_logprobs``) and on transformers (GPU 0, bf16): every token's log-prob
    within ``TOLERANCE``. Two unrelated models differ by about a nat or more per token. Control: the same
    continuation after other images (the frames' negatives) on both sides; images A vs B must move it by
    ``CONTROL_RATIO`` x more than the sides differ (``image_control``), or a server that ignores images passes;
 4. ``disk_push``: perturbed weights through ``DiskSync`` (``/update_weights_from_disk``): the checksum
    differs from the launch weights', and the continuation's log-probs match transformers on the same
    perturbed weights;
 5. ``nccl_push``: the launch weights back through ``NcclSync`` (pause, begin, 1 GiB buckets, end,
    continue): the checksum equals the launch weights' again (after ``disk_push`` changed it) and the
    log-probs match the launch weights';
 5b. ``learner_push``: a ``Learner`` (float32 masters, the tower frozen) pushed through the RL stage's own
    push (``Learner.weight_buckets`` into ``NcclSync``) twice: the disk push's weights with the tower (the
    disk push's checksum must come back), then the launch weights without it (per tensor: the language model
    sent, the tower kept), then in full (the launch checksum back);
 6. ``sft_step``: one FSDP2 step of ``paravt sft`` (torchrun, 1 GPU, bf16 + gradient checkpointing);
 7. ``sft_step_2gpu``: the same step with 2 FSDP2 ranks (GPUs 0 and 1) - skipped on a one-GPU machine;
 8. ``rl_step``: one step of ``paravt rl`` with the launcher's own plan (``paravt_core.rl.launch.plan``:
    server on GPU 1, the learner on GPU 0, the NCCL push): the step trained sequences, the server's weight
    checksum changed, and it equals that of a server launched from the run's saved final (the learner's
    weights, hashed by SGLang itself).

Writes ``<work>/gpu-check.json`` and ``gpu-check.md`` (pass / fail / skipped per item, detail, seconds);
exits 1 if any selected item did not pass (a skipped one included).

    python scripts/gpu_check.py [--work build/gpu-check] [--port 30000] [--only sft_step ...] [--tiny]
    make gpu-check GPU_CHECK_ARGS="--only sft_step"

Carried data (built on another machine) has its media paths re-pointed here (``gpu_profile.relocate``);
``sft_step`` starts from an empty output; ``--tiny`` runs it on the tiny model, on a CPU too (the lending
command's test, ``tests/e2e/test_gpu_lending.py``).

``--only`` runs the named items alone (the others read "skipped: not selected"): on a machine with one GPU and
no SGLang, ``--only sft_step`` is the item that can run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# agent pixel budget of the check (configs/rl/tiny.yaml's): 224x224 frames fit it exactly on the 32-px grid
MAX_PIXELS, MIN_PIXELS = 224 * 224, 32 * 32
ITEMS = [
    "sglang_launch",
    "prompt_token_parity",
    "logprob_parity",
    "disk_push",
    "nccl_push",
    "learner_push",
    "sft_step",
    "sft_step_2gpu",
    "rl_step",
]
NEEDS = {  # an item is skipped when one of these did not pass
    "prompt_token_parity": ["sglang_launch"],
    "logprob_parity": ["sglang_launch"],
    "disk_push": ["sglang_launch"],
    # the launch weights' checksum coming back proves the NCCL push only after the disk push changed it
    "nccl_push": ["sglang_launch", "disk_push"],
    # its first push must reproduce the disk push's checksum
    "learner_push": ["sglang_launch", "disk_push"],
}
# bf16 on both sides, different kernels: a few hundredths of a nat apart per token; unrelated weights (or
# weights loaded under the wrong names) are about a nat or more apart on the continuation's tokens
TOLERANCE = 0.25
CONTINUATION_TOKENS = 8
# the image control: images must move the continuation by this many times more than served and local differ
CONTROL_RATIO = 10.0


class Skip(Exception):
    """An item that cannot run on this machine (e.g. 2 GPUs needed): recorded as skipped, with the reason."""


@dataclasses.dataclass
class Item:
    name: str
    status: str  # "pass" | "fail" | "skipped"
    detail: str
    seconds: float


def run_items(
    checks: dict[str, Callable[[], str]],
    items: list[str] | None = None,
    needs: dict[str, list[str]] | None = None,
) -> list[Item]:
    """Run each check in ``items`` order (default ``ITEMS``, the SGLang list; ``gpu_check_vllm.ITEMS`` for
    vLLM); a check returns its detail or raises (fail; ``Skip``: skipped); one whose ``needs`` (default
    ``NEEDS``) did not pass is skipped. A failure never stops the others."""
    items = ITEMS if items is None else items
    needs = NEEDS if needs is None else needs
    done: dict[str, Item] = {}
    for name in items:
        missing = [n for n in needs.get(name, []) if done.get(n) is None or done[n].status != "pass"]
        if missing:
            done[name] = Item(name, "skipped", f"needs {', '.join(missing)}", 0.0)
            continue
        if name not in checks:
            done[name] = Item(name, "skipped", "not selected", 0.0)
            continue
        t0 = time.perf_counter()
        try:
            detail = checks[name]()
            status = "pass"
        except Skip as why:
            detail, status = str(why), "skipped"
        except Exception as err:  # recorded in the report
            detail = f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=3)}"
            status = "fail"
        done[name] = Item(name, status, detail, time.perf_counter() - t0)
    return [done[n] for n in items]


def checksum_of(answer: dict[str, Any]) -> str:
    """The whole server's weight checksum from a ``/weights_checker`` ``checksum`` answer (SGLang 0.5.23,
    ``entrypoints/http_server.py:check_weights``: ``{"success", "message", "ranks": [{"checksums": {name:
    hash}, "per_gpu_checksum", ...}], "per_engine_checksum"}``, the last a sha256 over every rank's)."""
    if not answer.get("success"):
        raise AssertionError(f"/weights_checker refused: {answer.get('message')!r}")
    ranks = answer.get("ranks") or []
    if not ranks or not all(r.get("checksums") for r in ranks):
        raise AssertionError("/weights_checker answered no tensor checksums")
    value = answer.get("per_engine_checksum")
    if not isinstance(value, str) or not value:
        raise AssertionError(f"/weights_checker answered no per_engine_checksum: {sorted(answer)}")
    return value


def weights_checksum(base_url: str, timeout_s: float = 600.0) -> str:
    """The served weights' checksum, computed by the server itself over every tensor it holds."""
    import httpx

    reply = httpx.post(base_url + "/weights_checker", json={"action": "checksum"}, timeout=timeout_s)
    try:
        answer = reply.json()
    except ValueError as err:
        raise AssertionError(f"/weights_checker: HTTP {reply.status_code}, not JSON") from err
    return checksum_of(answer)


def tensor_checksums(base_url: str, timeout_s: float = 600.0) -> dict[str, str]:
    """The served weights' per-tensor checksums (``/weights_checker``: rank i's ``name`` as ``i:name``)."""
    import httpx

    answer = httpx.post(base_url + "/weights_checker", json={"action": "checksum"}, timeout=timeout_s).json()
    checksum_of(answer)  # refusals and empty answers, as for the whole checksum
    return {f"{i}:{name}": h for i, r in enumerate(answer["ranks"]) for name, h in r["checksums"].items()}


def logprob_gap(served: list[float], ours: list[float], tol: float = TOLERANCE) -> str:
    """The continuation's log-probs on both sides agree token by token within ``tol`` (nats); a detail line,
    or ``AssertionError`` naming the largest difference."""
    if len(served) != len(ours) or not ours:
        raise AssertionError(f"{len(served)} served log-probs for {len(ours)} tokens")
    gaps = [abs(a - b) for a, b in zip(served, ours, strict=True)]
    worst = max(range(len(gaps)), key=gaps.__getitem__)
    if gaps[worst] > tol:
        raise AssertionError(
            f"log-probs differ by {gaps[worst]:.3f} > {tol} at token {worst} "
            f"(served {served[worst]:.3f}, ours {ours[worst]:.3f})"
        )
    return f"{len(gaps)} tokens, max log-prob gap {gaps[worst]:.4f}, mean {sum(gaps) / len(gaps):.4f}"


def image_control(
    served_a: list[float],
    local_a: list[float],
    served_b: list[float],
    local_b: list[float],
    ratio: float = CONTROL_RATIO,
) -> str:
    """The parity's control: the continuation scored after images A and after other images B, on the server
    and here. Images must move it on both sides by far more (``ratio`` x) than the sides differ, or the
    parity cannot see a server that mis-embeds or drops images (on random weights images may move it by
    less than a bf16 gap: then this fails, saying so). Means over tokens, in nats."""

    def mean_gap(x: list[float], y: list[float]) -> float:
        return sum(abs(a - b) for a, b in zip(x, y, strict=True)) / max(len(x), 1)

    gap = (mean_gap(served_a, local_a) + mean_gap(served_b, local_b)) / 2
    served, local = mean_gap(served_a, served_b), mean_gap(local_a, local_b)
    if not (served > ratio * gap and local > ratio * gap):
        raise AssertionError(
            f"images A vs B move the continuation by {served:.4f} nats/token on the server and {local:.4f} "
            f"here, not more than {ratio:g} x the served-vs-local gap {gap:.4f}: the parity cannot tell a "
            "server that mis-embeds images"
        )
    return f"images A vs B: {served:.4f} (served) / {local:.4f} (here) nats/token vs gap {gap:.4f}"


def score_payload(request: Any, continuation: list[int], image_token_id: int) -> dict[str, Any]:
    """A ``/generate`` body that makes SGLang score ``request``'s prompt followed by ``continuation``: the
    log-prob of every input token from position 0 (``logprob_start_len`` 0; the prompt's image pads are
    collapsed to one per image as for any request)."""
    from paravt_core.engines.base import GenerationRequest, SamplingParams
    from paravt_core.engines.sglang_engine import generate_payload

    scored = GenerationRequest(
        input_ids=[*request.input_ids, *continuation],
        images=request.images,
        sampling=SamplingParams(temperature=0.0, max_new_tokens=1),
    )
    body = generate_payload([scored], image_token_id=image_token_id, single=True)
    body["logprob_start_len"] = 0
    return body


def served_scores(answer: dict[str, Any], continuation: list[int]) -> list[float]:
    """The continuation's log-probs from a scoring answer: the last ``len(continuation)`` entries of
    ``meta_info.input_token_logprobs`` (``[logprob, token_id, text]``), whose ids must be the continuation."""
    entries = (answer.get("meta_info") or {}).get("input_token_logprobs") or []
    tail = entries[-len(continuation) :] if len(entries) >= len(continuation) else []
    ids = [int(e[1]) for e in tail]
    if ids != list(continuation):
        raise AssertionError(f"the server scored tokens {ids}, not the continuation {continuation}")
    return [float(e[0]) for e in tail]


def local_scores(model: Any, request: Any, continuation: list[int]) -> list[float]:
    """The continuation's log-probs under ``model`` (transformers, one forward pass, float32 log-softmax)."""
    import torch

    ids = torch.tensor([[*request.input_ids, *continuation]], device=model.device)
    types = (ids == model.config.image_token_id).long()  # 1 at image pads (M-RoPE positions)
    with torch.no_grad():
        logits = model(
            input_ids=ids,
            mm_token_type_ids=types,
            pixel_values=request.pixel_values.to(model.device, model.dtype),
            image_grid_thw=request.image_grid_thw.to(model.device),
        ).logits[0]
    n = len(continuation)
    logprobs = torch.log_softmax(logits[-n - 1 : -1].float(), dim=-1)
    return logprobs.gather(1, ids[0, -n:, None]).squeeze(1).tolist()


def write_report(items: list[Item], work: Path, environment: dict[str, Any]) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    payload = {"environment": environment, "items": [dataclasses.asdict(i) for i in items]}
    (work / "gpu-check.json").write_text(json.dumps(payload, indent=2))
    lines = ["# GPU check", "", *(f"- {k}: {v}" for k, v in environment.items()), ""]
    lines += ["| item | result | seconds | detail |", "|---|---|---|---|"]
    for i in items:
        first = i.detail.strip().splitlines()[0] if i.detail.strip() else ""
        lines.append(f"| {i.name} | {i.status.upper()} | {i.seconds:.1f} | {first.replace('|', '/')} |")
    passed = sum(i.status == "pass" for i in items)
    lines += ["", f"{passed}/{len(items)} passed"]
    path = work / "gpu-check.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def sft_command(
    model_dir: str,
    data_dir: str,
    output: str,
    python: str = sys.executable,
    nproc: int = 1,
    tiny: bool = False,
) -> list[str]:
    """One FSDP2 step of the published SFT recipe on ``nproc`` GPUs (shapes of the model at ``model_dir``);
    ``tiny``: configs/sft/tiny.yaml in one plain process (the CPU run of the lending command's test)."""
    recipe = "tiny.yaml" if tiny else "qwen3vl_8b.yaml"
    launch = (
        ["-m"] if tiny else ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", "-m"]
    )
    return [
        python, *launch, "paravt_core.cli", "sft", "--config", str(ROOT / "configs" / "sft" / recipe),
        f"model.uri={model_dir}", f"data.input={data_dir}", f"output={output}",
        "trainer.steps=1", "trainer.grad_accum=1", "checkpoint.every=1", "data.num_workers=2",
    ]  # fmt: skip


def rl_overrides(model_dir: str, data_dir: str, output: str, port: int) -> list[str]:
    """One RL step through the launcher's topology: server on GPU 1, learner on GPU 0, NCCL push."""
    return [
        f"model={model_dir}", f"data={data_dir}", f"output={output}",
        "device=cuda", "dtype=bfloat16", "steps=1", "checkpoint.every=1",
        "engine.kind=sglang", "engine.weight_sync=distributed", "engine.gpus=[1]", f"engine.port={port}",
        f"agent.max_pixels={MAX_PIXELS}", f"agent.min_pixels={MIN_PIXELS}",
    ]  # fmt: skip


def rl_plan(
    model_dir: str, data_dir: str, output: str, port: int, config_path: str, python: str = sys.executable
) -> Any:
    """The launcher's own plan (``paravt_core.rl.launch.plan``) for one RL step on 2 GPUs; the resolved
    config is written to ``config_path`` (what ``launch`` does). ``rl_step`` runs its server and learner
    itself, so that it can read the server's weights between them."""
    from paravt_core.config import config_to_yaml, load_config
    from paravt_core.rl.config import RlConfig
    from paravt_core.rl.launch import plan

    cfg = load_config(
        RlConfig, ROOT / "configs" / "rl" / "tiny.yaml", rl_overrides(model_dir, data_dir, output, port)
    )
    Path(config_path).parent.mkdir(parents=True, exist_ok=True)
    Path(config_path).write_text(config_to_yaml(cfg))
    return plan(cfg, config_path, gpus=2, model_dir=model_dir, python=python)


class GpuChecks:
    """The checks; state (the server, the local model, the launch weights' checksum, the continuation)
    passes from one to the next. ``device``: where the transformers side runs."""

    def __init__(self, work: Path, port: int, device: str = "cuda:0", tiny: bool = False):
        self.work, self.port, self.device, self.tiny = work, port, device, tiny
        self.model_dir = str(work / ("tiny-model" if tiny else "qwen3vl-2b-random"))
        self.data_dir = str(work / "data")
        self.server: Any = None
        self.client: Any = None
        self.local: Any = None
        self.launch_checksum: str | None = None  # the server's weights as launched
        self.pushed_checksum: str | None = None  # after disk_push
        self.continuation: list[int] | None = None

    # -- setup (not an item: a failure here fails every item that needs it) --------------------------------
    def prepare(self) -> None:
        """The model and the data under ``work`` (built when absent; carried data's media paths re-pointed
        like ``gpu_profile``'s, by the same code)."""
        from scripts.gpu_profile import prepare

        prepare(self.work, self.tiny)

    def connect(self, base_url: str, local: Any) -> None:
        """Talk to the server at ``base_url``; ``local``: the transformers side (``models.load``)."""
        from paravt_core.engines.sglang_engine import SGLangEngine

        self.local = local
        self.client = SGLangEngine(base_url, processor=local.processor)

    def request(self, processor: Any, other_images: bool = False):
        """The check's 4-frame request; ``other_images``: the same prompt with every frame's negative (the
        image-sensitivity control's images B)."""
        import numpy as np
        import torch

        from paravt_core.engines.base import GenerationRequest, SamplingParams, image_processor_kwargs

        rng = np.random.default_rng(0)
        frames = [torch.from_numpy(rng.integers(0, 256, (3, 224, 224), dtype=np.uint8)) for _ in range(4)]
        if other_images:
            frames = [255 - f for f in frames]
        parts = [{"type": "image", "image": f} for f in frames] + [{"type": "text", "text": "What happens?"}]
        text = processor.apply_chat_template(
            [{"role": "user", "content": parts}], add_generation_prompt=True, tokenize=False
        )
        out = processor(
            text=[text],
            images=frames,
            return_tensors="pt",
            **image_processor_kwargs(max_pixels=MAX_PIXELS, min_pixels=MIN_PIXELS),
        )
        return GenerationRequest(
            input_ids=out["input_ids"][0].tolist(),
            images=frames,
            pixel_values=out["pixel_values"],
            image_grid_thw=out["image_grid_thw"],
            sampling=SamplingParams(temperature=0.0, max_new_tokens=CONTINUATION_TOKENS),
        )

    def _generate(self, engine: Any, request: Any):
        import asyncio

        async def go():
            try:
                return (await engine.generate([request]))[0]
            finally:
                await engine.aclose()

        return asyncio.run(go())

    def _continuation(self) -> list[int]:
        """The fixed continuation: the transformers engine's greedy tokens on the launch weights (once)."""
        if self.continuation is None:
            from paravt_core.engines.transformers_engine import TransformersEngine

            engine = TransformersEngine(self.local.model, self.local.processor)
            self.continuation = list(self._generate(engine, self.request(self.local.processor)).token_ids)
        return self.continuation

    def _scores(self, model: Any, other_images: bool = False) -> tuple[list[float], list[float]]:
        """The continuation's log-probs (served, ``model``'s) after the request's prompt and images."""
        import httpx

        request = self.request(self.local.processor, other_images)
        continuation = self._continuation()
        body = score_payload(request, continuation, self.client.image_token_id)
        reply = httpx.post(self.client.base_url + "/generate", json=body, timeout=600.0)
        reply.raise_for_status()
        return served_scores(reply.json(), continuation), local_scores(model, request, continuation)

    def _parity(self, model: Any) -> str:
        """The continuation scored by the server and by ``model``: ``logprob_gap``'s detail."""
        return logprob_gap(*self._scores(model))

    def checksum(self) -> str:
        return weights_checksum(self.client.base_url)

    # -- items ---------------------------------------------------------------------------------------------
    def sglang_launch(self) -> str:
        import os

        import torch

        from paravt_core.engines.sglang_engine import SGLangServer, launch_command
        from paravt_core.models import load

        if torch.cuda.device_count() < 2:
            raise RuntimeError(f"needs 2 GPUs, found {torch.cuda.device_count()}")
        cmd = launch_command(
            self.model_dir, port=self.port, base_gpu_id=0, max_pixels=MAX_PIXELS, min_pixels=MIN_PIXELS
        )
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "1"}
        log = str(self.work / "sglang-server.log")
        self.server = SGLangServer(cmd, f"http://127.0.0.1:{self.port}", log_path=log, env=env).start(
            timeout_s=900
        )
        self.connect(self.server.base_url, load(self.model_dir, device=self.device, dtype=torch.bfloat16))
        self.launch_checksum = self.checksum()
        return f"weights checksum {self.launch_checksum[:16]}; " + " ".join(cmd)

    def prompt_token_parity(self) -> str:
        request = self.request(self.local.processor)
        completion = self._generate(self.client, request)  # PromptTokenMismatch if the counts differ
        if completion.prompt_tokens != len(request.input_ids):
            raise AssertionError(f"server {completion.prompt_tokens} != ours {len(request.input_ids)}")
        return f"prompt_tokens {completion.prompt_tokens} on both sides"

    def logprob_parity(self) -> str:
        served_a, local_a = self._scores(self.local.model)
        parity = logprob_gap(served_a, local_a)
        served_b, local_b = self._scores(self.local.model, other_images=True)
        logprob_gap(served_b, local_b)
        control = image_control(served_a, local_a, served_b, local_b)
        return f"sglang vs transformers, launch weights: {parity}; {control}"

    def _perturbed(self) -> dict:
        import torch

        g = torch.Generator(device="cpu").manual_seed(1)
        return {
            k: (v.float() + 0.02 * torch.randn(v.shape, generator=g)).to(v.dtype)
            if v.is_floating_point()
            else v
            for k, v in ((k, v.detach().cpu()) for k, v in self.local.model.state_dict().items())
        }

    def disk_push(self) -> str:
        from paravt_core.models import load
        from paravt_core.rl.weight_sync import DiskSync

        if self.launch_checksum is None:
            raise AssertionError("no checksum of the launch weights (sglang_launch)")
        self._continuation()  # fixed on the launch weights, before they change
        weights = self._perturbed()
        DiskSync(self.client, self.local.model, str(self.work / "staging")).push(weights, 1)
        self.pushed_checksum = self.checksum()
        if self.pushed_checksum == self.launch_checksum:
            raise AssertionError(
                "the server's weight checksum is unchanged by the disk push: it did not land"
            )
        reference = load(self.model_dir, device=self.device, dtype=self.local.model.dtype)
        reference.model.load_state_dict(weights)
        parity = self._parity(reference.model)
        return f"checksum changed; served vs transformers on the pushed weights: {parity}"

    def nccl_push(self) -> str:
        from paravt_core.rl.weight_sync import NcclSync

        sync = NcclSync(self.client, master_address="127.0.0.1", master_port=29611, server_ranks=1)
        original = {k: v.detach() for k, v in self.local.model.state_dict().items()}
        sync.push(original, 2)
        after = self.checksum()
        if after != self.launch_checksum:
            raise AssertionError(
                f"after pushing the launch weights the checksum is {after[:16]}, not the launch weights' "
                f"{(self.launch_checksum or '')[:16]}"
                + (
                    " (still the disk push's: the NCCL push did not land)"
                    if after == self.pushed_checksum
                    else ""
                )
            )
        parity = self._parity(self.local.model)
        return f"{len(sync.pushed_buckets)} bucket(s); launch checksum back; log-probs: {parity}"

    def learner_push(self) -> str:
        """``Learner``'s weights pushed through the RL stage's own push (``WeightPush.push``: the learner's buckets
        gathered and cast to the served dtype, ``NcclSync``), twice. 1: the disk push's perturbed weights, the
        tower included: the checksum must be the disk push's. 2: the launch weights, without the tower (sent
        by the first push only): the language model's tensors must be the launch ones and the tower's those of
        push 1. 3: the launch weights in full (a new sync): the launch checksum back."""
        import dataclasses

        import torch

        from paravt_core.models import load
        from paravt_core.rl.config import RlConfig
        from paravt_core.rl.learner import Learner
        from paravt_core.rl.push import WeightPush
        from paravt_core.rl.weight_sync import NcclSync
        from paravt_core.train.dist import Dist

        if self.launch_checksum is None or self.pushed_checksum is None:
            raise AssertionError(
                "no checksum of the launch or disk-pushed weights (sglang_launch, disk_push)"
            )
        cfg = RlConfig(
            engine={"kind": "sglang", "weight_sync": "distributed", "base_url": self.client.base_url}
        )
        served = self.local.model.dtype
        learner = Learner(  # float32 masters (as the RL learner on a GPU), the vision tower frozen
            load(self.model_dir, device=self.device, dtype=torch.float32).model,
            load(self.model_dir, device=self.device, dtype=served).model,
            temperature=cfg.agent.temperature,
            advantage=cfg.advantage,
            loss=cfg.loss,
            optim=cfg.optim,
            dist=dataclasses.replace(Dist(), device=torch.device(self.device)),
        )
        frozen = learner.frozen_names()
        if not frozen:
            raise AssertionError("the learner froze no tensor: nothing to leave out of the second push")
        launch = {k: v.detach().to("cpu", copy=True) for k, v in self.local.model.state_dict().items()}

        def sync(port: int) -> Any:
            made = NcclSync(
                self.client, master_address="127.0.0.1", master_port=port, server_ranks=1, dtype=served
            )
            made.static = frozen
            return made

        first = sync(29612)
        run = WeightPush(learner.dist, learner, first, served, streams=True)  # the RL stage's own push
        syncs = [first]
        try:
            learner.model.load_state_dict(self._perturbed())
            run.push(1)
            one, after_one = self.checksum(), tensor_checksums(self.client.base_url)
            if one != self.pushed_checksum:
                raise AssertionError(
                    f"after the learner's first push the checksum is {one[:12]}, not the disk push's "
                    f"{self.pushed_checksum[:12]} of the same weights: the push landed other weights"
                )
            learner.model.load_state_dict(launch)
            run.push(2)
            sent = {n for b in first.pushed_buckets for n in b}
            if sent & frozen or not sent:
                raise AssertionError(
                    f"the second push sent {len(sent & frozen)} frozen tensors of {len(sent)}"
                )
            two, after_two = self.checksum(), tensor_checksums(self.client.base_url)
            syncs.append(sync(29613))  # a new group and sync: its first push is a full one
            run.sync = syncs[-1]
            run.pushed_full = False
            run.push(3)  # in full: the tower back to the launch weights too
            three, after_three = self.checksum(), tensor_checksums(self.client.base_url)
        finally:
            for made in syncs:
                made.close()
        return push_twice_verdict(after_one, after_two, after_three, two, one, self.launch_checksum, three)

    def stop_server(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def _sft(self, output: Path, nproc: int) -> str:
        import shutil

        shutil.rmtree(output, ignore_errors=True)  # from an empty output: a rerun never reuses a finished one
        command = sft_command(self.model_dir, self.data_dir, str(output), nproc=nproc, tiny=self.tiny)
        subprocess.run(command, check=True)
        records = [json.loads(x) for x in (output / "metrics.jsonl").read_text().splitlines()]
        if len(records) != 1:
            raise AssertionError(f"{len(records)} steps recorded, expected 1")
        shown = {k: records[0].get(k) for k in ("loss", "grad_norm", "tokens", "peak_mem_gib")}
        if not all(isinstance(shown[k], (int, float)) and shown[k] > 0 for k in ("loss", "grad_norm")):
            raise AssertionError(f"the step did not train: {json.dumps(shown)}")
        return f"1 FSDP2 step on {nproc} GPU(s): {json.dumps(shown)}"

    def sft_step(self) -> str:
        return self._sft(self.work / "sft", 1)

    def sft_step_2gpu(self) -> str:
        import torch

        if torch.cuda.device_count() < 2:
            raise Skip(f"needs 2 GPUs, found {torch.cuda.device_count()}")
        self.stop_server()  # GPU 1 is needed whole
        return self._sft(self.work / "sft-2gpu", 2)

    def rl_step(self) -> str:
        import os

        from paravt_core.engines.sglang_engine import SGLangServer

        self.stop_server()  # the launcher's plan starts its own server on GPU 1
        output = self.work / "rl"
        p = rl_plan(self.model_dir, self.data_dir, str(output), self.port, str(self.work / "rl.yaml"))
        env = {**os.environ, **p.server_env}
        log = str(self.work / "sglang-server-rl.log")
        server = SGLangServer(p.server_command, p.base_url, log_path=log, env=env)
        server.start(timeout_s=900)
        try:
            before = weights_checksum(p.base_url)
            subprocess.run(p.learner_command, env={**os.environ, **p.learner_env}, check=True)
            after = weights_checksum(p.base_url)
        finally:
            server.stop()
        # the learner's own weights, as SGLang hashes them: a server launched from the saved final (bf16,
        # the served dtype) must hold exactly what the push left on the pushed one
        command = with_model_path(p.server_command, str(output / "final"))
        log = str(self.work / "sglang-server-final.log")
        final = SGLangServer(command, p.base_url, log_path=log, env=env)
        final.start(timeout_s=900)
        try:
            saved = weights_checksum(p.base_url)
        finally:
            final.stop()
        return rl_verdict(output, before, after, saved)


def push_twice_verdict(
    one: dict[str, str],
    two: dict[str, str],
    launch: dict[str, str],
    whole_two: str,
    whole_one: str,
    whole_launch: str,
    whole_three: str,
) -> str:
    """The served tensors after push 1 (perturbed, the tower included), push 2 (the launch weights without
    the tower) and push 3 (the launch weights in full): per-tensor checksums ``one``, ``two``, ``launch``;
    ``whole_*`` the server's (``whole_launch``: as launched). After push 2 every tensor is either the launch
    one (sent) or push 1's (kept), and there are both; push 3 brings the launch checksum back."""
    if whole_two == whole_launch:
        raise AssertionError(
            "after the second push the server holds the launch weights: the tower was sent again"
        )
    if whole_two == whole_one:
        raise AssertionError(
            "after the second push the server holds the first push's weights: the second push did not land"
        )
    if whole_three != whole_launch:
        raise AssertionError(
            f"a full push of the launch weights left checksum {whole_three[:12]}, not the launch one"
        )
    if not (one.keys() == two.keys() == launch.keys()):
        raise AssertionError("the served tensors' names changed between pushes")
    sent = {k for k in two if two[k] == launch[k] != one[k]}
    kept = {k for k in two if two[k] == one[k] != launch[k]}
    other = {k for k in two if two[k] not in (one[k], launch[k])}
    if other or not sent or not kept:
        raise AssertionError(
            f"after the second push: {len(sent)} tensors sent, {len(kept)} kept from the first, {len(other)} "
            f"neither (e.g. {sorted(other)[:3]})"
        )
    return (
        f"push 1 = the disk push's checksum; push 2: {len(sent)} tensors sent, {len(kept)} (the tower) kept"
    )


def with_model_path(command: list[str], model_path: str) -> list[str]:
    """A server command with ``--model-path`` replaced."""
    at = command.index("--model-path") + 1
    return [*command[:at], model_path, *command[at + 1 :]]


def rl_verdict(output: Path, before: str, after: str, saved: str) -> str:
    """One RL step's outputs and the server's checksums before and after it and of a server launched from
    the saved final: the step trained sequences, reached policy version 1, the served weights changed, and
    they are the learner's (a partial, misnamed or mis-cast push changes the checksum too, to another value)."""
    steps = [json.loads(x) for x in (output / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((output / "metrics.json").read_text())
    trained = steps[-1].get("trained_sequences", 0) if steps else 0
    if not trained or trained <= 0:
        raise AssertionError(f"the step trained no sequence (trained_sequences {trained})")
    if summary.get("policy_version") != 1:
        raise AssertionError(f"policy_version {summary.get('policy_version')} after one step")
    if after == before:
        raise AssertionError(
            "the server's weight checksum is unchanged after the step: the push did not land"
        )
    if after != saved:
        raise AssertionError(
            f"the pushed server's checksum {after[:12]} is not the saved final's {saved[:12]}: the push "
            "landed other weights than the learner's"
        )
    return (
        f"1 step, {trained:g} sequences trained, server checksum {before[:12]} -> {after[:12]} "
        "= the saved final's"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work", default=str(ROOT / "build" / "gpu-check"))
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument(
        "--only",
        action="append",
        metavar="ITEM",
        help=f"run only these items (sglang: {', '.join(ITEMS)}; vllm: those of scripts/gpu_check_vllm.py)",
    )
    parser.add_argument("--tiny", action="store_true", help="the tiny model; sft_step runs on a CPU too")
    parser.add_argument(
        "--engine",
        choices=["sglang", "vllm"],
        default="sglang",
        help="the serving engine the engine items check (vllm: scripts/gpu_check_vllm.py; on a CPU with "
        "--tiny and vLLM's CPU build too)",
    )
    parser.add_argument("--python", default=sys.executable, help="--engine vllm: the Python with vLLM")
    args = parser.parse_args(argv)
    from scripts import gpu_check_vllm

    known = gpu_check_vllm.ITEMS if args.engine == "vllm" else ITEMS
    unknown = sorted(set(args.only or []) - set(known))
    if unknown:
        parser.error(
            f"--only {', '.join(unknown)}: not an item of --engine {args.engine} ({', '.join(known)})"
        )
    if args.engine == "vllm":
        return main_vllm(args)
    import torch

    work = Path(args.work)
    selected = args.only or ITEMS
    environment = {
        "torch": torch.__version__,
        "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
    }
    checks = GpuChecks(work, args.port, tiny=args.tiny)
    if not torch.cuda.is_available() and not (args.tiny and set(selected) <= {"sft_step"}):
        items = [
            Item(n, "fail", "no CUDA device: make gpu-check is for a machine with GPUs", 0.0) for n in ITEMS
        ]
    else:
        try:
            checks.prepare()
            items = run_items({n: getattr(checks, n) for n in selected})
        finally:
            checks.stop_server()
    path = write_report(items, work, environment)
    print(path.read_text())
    return 0 if all(i.status == "pass" for i in items if i.name in selected) else 1


def main_vllm(args: argparse.Namespace) -> int:
    """``--engine vllm``: the vLLM items (``gpu_check_vllm.ITEMS``) on 2 GPUs, or on a CPU with ``--tiny``."""
    import torch

    from scripts import gpu_check_vllm
    from scripts.gpu_profile import prepare

    work = Path(args.work)
    cpu = not torch.cuda.is_available()
    environment = {"torch": torch.__version__, "engine": "vllm", "device": "cpu" if cpu else "cuda"}
    if cpu and not args.tiny:
        items = [Item(n, "fail", "no CUDA device: on a CPU pass --tiny", 0.0) for n in gpu_check_vllm.ITEMS]
    else:
        model_dir, data_dir = prepare(work, args.tiny)
        checks = gpu_check_vllm.VllmChecks(
            work, model_dir, data_dir, port=args.port, python=args.python, cpu=cpu
        )
        selected = [n for n in gpu_check_vllm.ITEMS if not args.only or n in args.only]
        try:
            items = run_items(
                {n: getattr(checks, n) for n in selected}, gpu_check_vllm.ITEMS, gpu_check_vllm.NEEDS
            )
        finally:
            checks.stop_server()
    path = write_report(items, work, environment)
    print(path.read_text())
    return 0 if all(i.status == "pass" for i in items if not args.only or i.name in args.only) else 1


if __name__ == "__main__":
    sys.exit(main())
