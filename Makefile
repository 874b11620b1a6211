# The two commands of the README: `make demo` and `make test`. Both set up what they need first: the demo ffmpeg
# and .venv (`scripts/setup.sh demo`); test and the other targets everything (+ Ceph and the side sites).
VENV := .venv
PYTEST_ARGS ?=

.PHONY: setup setup-demo demo test test-unit lint format bench bench-materialize bench-video bench-dispatch bench-sft bench-step-host bench-rl-step-host bench-rollout bench-eval bench-scoring compile images-smoke images-dag-smoke gpu-check gpu-profile gpu-carry gpu-lending gpu-rehearsal mutation clean ablations-demo

setup:
	@scripts/setup.sh all

setup-demo:
	@scripts/setup.sh demo

demo: setup-demo
	$(VENV)/bin/paravt demo --out-dir demo-out

test: setup lint
	$(VENV)/bin/python -m pytest -q $(PYTEST_ARGS)

# The fast tier alone (tests/unit: in-process, no server or side site): only what `make demo` sets up.
test-unit: setup-demo
	$(VENV)/bin/python -m pytest -q tests/unit $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# The paper's ablation study through kfp.local on the tiny model: data and SFT once, four rows (vanilla_grpo,
# para_grpo, no_tool_reward, sequential_tools) x 2 RL steps, eval, comparison report (minutes; not in `test`).
ablations-demo: setup
	OMP_NUM_THREADS=1 $(VENV)/bin/python -m pipelines.ablations_local --out-dir ablations-demo-out

compile: setup
	$(VENV)/bin/paravt pipeline compile train build/train.yaml
	$(VENV)/bin/paravt pipeline compile nightly build/nightly.yaml
	$(VENV)/bin/paravt pipeline compile ablations build/ablations.yaml

# For a machine with 2 GPUs and the RL image's Python (sglang 0.5.23): SGLang launch, prompt-token and greedy
# parity, disk and NCCL pushes, one FSDP2 SFT step, one RL step; report in build/gpu-check/gpu-check.md.
GPU_PYTHON ?= python3
gpu-check:
	$(GPU_PYTHON) scripts/gpu_check.py $(GPU_CHECK_ARGS)

# For a machine with one GPU (the image's torch is enough): 1 + 2 SFT steps at Qwen3-VL-2B shapes under
# torch.profiler; trace and summary in build/gpu-profile/, summary appended to docs/gpu-runs.md.
gpu-profile:
	$(GPU_PYTHON) scripts/gpu_profile.py $(GPU_PROFILE_ARGS)

# On the build machine: build/gpu-carry (dependencies for the GPU image's Python + the synthetic data, < 50 MiB).
gpu-carry: setup
	PYTHON=$(VENV)/bin/python scripts/gpu_carry.sh

# On a lent one-GPU machine, with build/gpu-carry carried: versions, probe, three profiles, sft_step in <= 7 min;
# at most 8 files in $$OUT and the summary on stdout (docs/gpu-profile.md). Without make: scripts/gpu_lending.sh.
gpu-lending:
	PYTHON=$(GPU_PYTHON) scripts/gpu_lending.sh $(GPU_LENDING_ARGS)

# The lending rehearsed here on a stand-in of the lent image: pyenv's Python 3.12 with the image's torch 2.11 /
# transformers 5.17 (downloads ~4.5 GB; not in `test`), only the carry on top, gpu_lending.sh --tiny on the CPU.
gpu-rehearsal: setup
	scripts/gpu_rehearsal.sh

# Builds the three images with podman and runs a stage in a container (minutes, several GB; not in `test`).
images-smoke: setup
	scripts/images-smoke.sh

# The demo DAG through kfp.local.DockerRunner inside those images (podman's Docker API; not in `test`).
images-dag-smoke: setup
	scripts/images-dag-smoke.sh

bench: bench-materialize bench-video bench-dispatch bench-sft bench-step-host bench-rl-step-host bench-rollout bench-eval bench-scoring

bench-materialize: setup
	$(VENV)/bin/python benchmarks/materialize.py

# The release's decoders (qwen-vl-utils, decord) live only in the benchmark's own site dir.
bench-video: setup
	$(VENV)/bin/pip install --quiet --target .venv-bench/site --no-deps qwen-vl-utils==0.0.14 decord==0.6.0
	PYTHONPATH=.venv-bench/site $(VENV)/bin/python benchmarks/video.py

bench-dispatch: setup
	$(VENV)/bin/python benchmarks/dispatch.py

# The release's per-row strategy (qwen-vl-utils) lives only in the benchmark's own site dir.
bench-sft: setup
	$(VENV)/bin/pip install --quiet --target .venv-bench/site --no-deps qwen-vl-utils==0.0.14
	PYTHONPATH=.venv-bench/site $(VENV)/bin/python benchmarks/sft_inputs.py

# Host cost of one SFT step (zero-cost model stand-in) before and after issue 32's step, against the step
# time of 40 % MFU at 2B and 8B shapes on one H100.
bench-step-host: setup
	OMP_NUM_THREADS=1 $(VENV)/bin/python benchmarks/step_host.py

# One RL learner step (tiny model, CPU): the per-micro-batch reference vs the one-read step, alternating.
bench-rl-step-host: setup
	OMP_NUM_THREADS=1 PYTHONPATH=. $(VENV)/bin/python benchmarks/rl_step_host.py

bench-rollout: setup
	OMP_NUM_THREADS=1 $(VENV)/bin/python benchmarks/rollout.py

# Eval runner: concurrent samples with cross-sample batching vs one sample at a time (tiny model, CPU).
bench-eval: setup
	OMP_NUM_THREADS=1 $(VENV)/bin/python benchmarks/eval_throughput.py

# Mutation testing of the pure modules (mutmut 3; hours on 2 cores, not in `test`): kill rate per module and
# every survivor (docs/mutation.md). MODULES="rl/loss.py rl/gating.py" limits it. PLATFORM=1: the GPU-path and
# platform modules instead, each in its own scratch root (MODULES="train/syncs.py cli_errors.py").
mutation: setup
	$(VENV)/bin/python scripts/mutation.py $(if $(PLATFORM),--platform) $(foreach m,$(MODULES),--only '$(m)')

# Answer scoring vs lmms-eval 0.7.3's task scorers (side site from setup) and the release's rule: agreement per
# benchmark and every disagreement with its reason.
bench-scoring: setup
	PYTHONPATH=. $(VENV)/bin/python benchmarks/scoring.py

clean:
	rm -rf demo-out ablations-demo-out build .pytest_cache mutants
