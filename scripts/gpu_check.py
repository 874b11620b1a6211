"""The GPU checklist as one command (``make gpu-check``): what this project's CPU machines cannot run.

Needs 2 GPUs (the NCCL push cannot put two ranks of one group on one GPU; the others need one) and the RL
image's Python (``sglang==0.5.23``). On a random-initialized Qwen3-VL-shaped model (Qwen3-VL-2B's shapes,
``benchmarks/sft_gpu_check.py build``; nothing downloaded) and synthetic data through the data stage:

 1. ``sglang_launch``: our launch command (``--mm-process-config`` with the agent's pixel budget) on GPU 1,
    pinned with ``CUDA_VISIBLE_DEVICES``, healthy within the timeout;
 2. ``prompt_token_parity``: a 4-frame image request (224x224 frames) - the server's ``prompt_tokens`` equals
    our expanded prompt length (it made the same image tokens as our processor);
 3. ``greedy_parity``: the same prompt, greedy, on SGLang and on the transformers engine (GPU 0, bf16): 8
    tokens agree up to a near tie and their log-probs are within 0.1 (``greedy_agree``: a random model's
    next-token distribution is nearly flat, so bf16 rounding may break a tie either way);
 4. ``disk_push``: perturbed weights through ``DiskSync`` (``/update_weights_from_disk``): the greedy output
    changes and agrees with the transformers engine's on the same perturbed weights;
 5. ``nccl_push``: the original weights back through ``NcclSync`` (pause, begin, 1 GiB buckets, end,
    continue): the greedy output agrees with the first greedy run's;
 6. ``sft_step``: one FSDP2 step of ``paravt sft`` (torchrun, 1 GPU, bf16 + gradient checkpointing);
 7. ``rl_step``: one step of ``paravt rl`` through the topology launcher (``python -m paravt_core.rl.launch``:
    server on GPU 1, the learner on GPU 0, the NCCL push): policy version 1.

Writes ``<work>/gpu-check.json`` and ``gpu-check.md`` (pass / fail / skipped per item, detail, seconds);
exits 1 if any selected item did not pass.

    python scripts/gpu_check.py [--work build/gpu-check] [--port 30000] [--only sft_step ...]

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
    "greedy_parity",
    "disk_push",
    "nccl_push",
    "sft_step",
    "rl_step",
]
NEEDS = {  # an item is skipped when one of these did not pass
    "prompt_token_parity": ["sglang_launch"],
    "greedy_parity": ["sglang_launch"],
    "disk_push": ["sglang_launch"],
    "nccl_push": ["sglang_launch", "greedy_parity"],
}


@dataclasses.dataclass
class Item:
    name: str
    status: str  # "pass" | "fail" | "skipped"
    detail: str
    seconds: float


def run_items(checks: dict[str, Callable[[], str]]) -> list[Item]:
    """Run each check in ``ITEMS`` order; a check returns its detail or raises (fail); one whose ``NEEDS`` did
    not pass is skipped. A failure never stops the others."""
    done: dict[str, Item] = {}
    for name in ITEMS:
        missing = [n for n in NEEDS.get(name, []) if done.get(n) is None or done[n].status != "pass"]
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
        except Exception as err:  # recorded in the report
            detail = f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=3)}"
            status = "fail"
        done[name] = Item(name, status, detail, time.perf_counter() - t0)
    return [done[n] for n in ITEMS]


def greedy_agree(a: Any, b: Any, tol: float = 0.1) -> str:
    """Greedy outputs ``a`` and ``b`` (completions with ``token_ids`` and ``logprobs``) agree: the same tokens
    up to the first difference, log-probs within ``tol`` there, and at a difference both engines' chosen
    tokens equally likely within ``tol`` (a tie that bf16 rounding may break either way: a random model's
    next-token distribution is nearly flat). Returns a detail line; raises ``AssertionError`` otherwise."""
    n = min(len(a.token_ids), len(b.token_ids))
    k = next((i for i in range(n) if a.token_ids[i] != b.token_ids[i]), n)
    upto = min(k + 1, n)  # the diverging position's own log-probs are compared too
    gaps = [abs(a.logprobs[i] - b.logprobs[i]) for i in range(upto)]
    gap = max(gaps, default=0.0)
    if gap > tol:
        raise AssertionError(
            f"log-probs differ by {gap:.3f} > {tol} (tokens {a.token_ids} vs {b.token_ids}, first difference at {k})"
        )
    if k == n and len(a.token_ids) != len(b.token_ids):
        raise AssertionError(f"lengths differ: {a.token_ids} vs {b.token_ids}")
    tie = (
        ""
        if k == n
        else f", a near tie at token {k} (chosen log-probs {a.logprobs[k]:.3f} / {b.logprobs[k]:.3f})"
    )
    return f"{k} of {n} tokens equal{tie}, max log-prob gap {gap:.4f}"


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


def sft_command(model_dir: str, data_dir: str, output: str, python: str = sys.executable) -> list[str]:
    """One FSDP2 step of the published SFT recipe on GPU 0 (shapes of the model at ``model_dir``)."""
    return [
        python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
        "-m", "paravt_core.cli", "sft", "--config", str(ROOT / "configs" / "sft" / "qwen3vl_8b.yaml"),
        f"model.uri={model_dir}", f"data.input={data_dir}", f"output={output}",
        "trainer.steps=1", "trainer.grad_accum=1", "checkpoint.every=1", "data.num_workers=2",
    ]  # fmt: skip


def rl_overrides(model_dir: str, data_dir: str, output: str, port: int) -> list[str]:
    """One RL step through the launcher: server on GPU 1, learner on GPU 0, NCCL push."""
    return [
        f"model={model_dir}", f"data={data_dir}", f"output={output}",
        "device=cuda", "dtype=bfloat16", "steps=1", "checkpoint.every=1",
        "engine.kind=sglang", "engine.weight_sync=distributed", "engine.gpus=[1]", f"engine.port={port}",
        f"agent.max_pixels={MAX_PIXELS}", f"agent.min_pixels={MIN_PIXELS}",
    ]  # fmt: skip


def rl_command(
    model_dir: str, data_dir: str, output: str, port: int, python: str = sys.executable
) -> list[str]:
    config = str(ROOT / "configs" / "rl" / "tiny.yaml")
    return [
        python,
        "-m",
        "paravt_core.rl.launch",
        "--config",
        config,
        *rl_overrides(model_dir, data_dir, output, port),
    ]


class GpuChecks:
    """The seven checks; state (the server, the engines, first greedy tokens) passes from one to the next."""

    def __init__(self, work: Path, port: int):
        self.work, self.port = work, port
        self.model_dir = str(work / "qwen3vl-2b-random")
        self.data_dir = str(work / "data")
        self.server: Any = None
        self.client: Any = None
        self.local: Any = None
        self.first: Any = None  # SGLang's greedy completion on the original weights

    # -- setup (not an item: a failure here fails every item that needs it) --------------------------------
    def prepare(self) -> None:
        from benchmarks.sft_gpu_check import build
        from paravt_core.config import DataConfig, load_config
        from paravt_core.data.stage import run as data_run
        from paravt_core.synth import synthesize

        if not Path(self.model_dir, "config.json").is_file():
            build(self.model_dir, None)
        if not Path(self.data_dir).is_dir():
            synth = synthesize(str(self.work / "synth"), videos=8, seconds=20, seed=0)
            overrides = [
                f"download.media_source={synth.source_dir}",
                f"download.parquet_source={synth.parquet_dir}",
                f"work_dir={self.work / 'data-work'}",
                f"output={self.data_dir}",
            ]
            data_run(load_config(DataConfig, None, overrides))

    def request(self, processor: Any):
        import numpy as np
        import torch

        from paravt_core.engines.base import GenerationRequest, SamplingParams

        rng = np.random.default_rng(0)
        frames = [torch.from_numpy(rng.integers(0, 256, (3, 224, 224), dtype=np.uint8)) for _ in range(4)]
        parts = [{"type": "image", "image": f} for f in frames] + [{"type": "text", "text": "What happens?"}]
        text = processor.apply_chat_template(
            [{"role": "user", "content": parts}], add_generation_prompt=True, tokenize=False
        )
        from paravt_core.engines.base import image_processor_kwargs

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
            sampling=SamplingParams(temperature=0.0, max_new_tokens=8),
        )

    def _generate(self, engine: Any, request: Any):
        import asyncio

        async def go():
            try:
                return (await engine.generate([request]))[0]
            finally:
                await engine.aclose()

        return asyncio.run(go())

    # -- items ---------------------------------------------------------------------------------------------
    def sglang_launch(self) -> str:
        import os

        import torch

        from paravt_core.engines.sglang_engine import SGLangEngine, SGLangServer, launch_command
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
        self.local = load(self.model_dir, device="cuda:0", dtype=torch.bfloat16)
        self.client = SGLangEngine(self.server.base_url, processor=self.local.processor)
        return " ".join(cmd)

    def prompt_token_parity(self) -> str:
        request = self.request(self.local.processor)
        completion = self._generate(self.client, request)  # PromptTokenMismatch if the counts differ
        if completion.prompt_tokens != len(request.input_ids):
            raise AssertionError(f"server {completion.prompt_tokens} != ours {len(request.input_ids)}")
        return f"prompt_tokens {completion.prompt_tokens} on both sides"

    def greedy_parity(self) -> str:
        from paravt_core.engines.transformers_engine import TransformersEngine

        request = self.request(self.local.processor)
        served = self._generate(self.client, request)
        ours = self._generate(TransformersEngine(self.local.model, self.local.processor), request)
        self.first = served
        return "sglang vs transformers: " + greedy_agree(served, ours)

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
        from paravt_core.engines.transformers_engine import TransformersEngine
        from paravt_core.models import load
        from paravt_core.rl.weight_sync import DiskSync

        weights = self._perturbed()
        DiskSync(self.client, self.local.model, str(self.work / "staging")).push(weights, 1)
        request = self.request(self.local.processor)
        served = self._generate(self.client, request)
        reference = load(self.model_dir, device="cuda:0", dtype=self.local.model.dtype)
        reference.model.load_state_dict(weights)
        ours = self._generate(TransformersEngine(reference.model, reference.processor), request)
        if self.first is not None and served.token_ids == self.first.token_ids:
            raise AssertionError("greedy tokens unchanged by the perturbed weights: the push did not land")
        return "served after the push vs transformers on the pushed weights: " + greedy_agree(served, ours)

    def nccl_push(self) -> str:
        from paravt_core.rl.weight_sync import NcclSync

        sync = NcclSync(self.client, master_address="127.0.0.1", master_port=29611, server_ranks=1)
        original = {k: v.detach() for k, v in self.local.model.state_dict().items()}
        sync.push(original, 2)
        served = self._generate(self.client, self.request(self.local.processor))
        if self.first is None:
            raise AssertionError("greedy_parity did not record the original weights' output")
        detail = greedy_agree(served, self.first)
        return f"{len(sync.pushed_buckets)} bucket(s); back to the original weights' output: {detail}"

    def stop_server(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def sft_step(self) -> str:
        output = self.work / "sft"
        subprocess.run(sft_command(self.model_dir, self.data_dir, str(output)), check=True)
        records = [json.loads(x) for x in (output / "metrics.jsonl").read_text().splitlines()]
        if len(records) != 1:
            raise AssertionError(f"{len(records)} steps recorded, expected 1")
        shown = {k: records[0].get(k) for k in ("loss", "grad_norm", "tokens", "peak_mem_gib")}
        return f"1 FSDP2 step: {json.dumps(shown)}"

    def rl_step(self) -> str:
        self.stop_server()  # the launcher starts its own server on GPU 1
        output = self.work / "rl"
        subprocess.run(rl_command(self.model_dir, self.data_dir, str(output), self.port), check=True)
        summary = json.loads((output / "metrics.json").read_text())
        if summary.get("policy_version") != 1:
            raise AssertionError(f"policy_version {summary.get('policy_version')} after one step")
        return "1 step through the launcher, NCCL push: policy_version 1"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work", default=str(ROOT / "build" / "gpu-check"))
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument(
        "--only",
        action="append",
        choices=ITEMS,
        metavar="ITEM",
        help=f"run only these items ({', '.join(ITEMS)})",
    )
    args = parser.parse_args(argv)
    import torch

    work = Path(args.work)
    selected = args.only or ITEMS
    environment = {
        "torch": torch.__version__,
        "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
    }
    checks = GpuChecks(work, args.port)
    if not torch.cuda.is_available():
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


if __name__ == "__main__":
    sys.exit(main())
