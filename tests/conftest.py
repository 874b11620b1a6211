"""Shared fixtures live in tests/fixtures/*; each module is registered here as a plugin.

Hypothesis profiles: ``ci`` (chosen when the ``CI`` environment variable is set) is derandomized, so a
property test explores the same examples on every run and a rare branch it reaches is reached every
time; it runs many examples and has no deadline (a loaded 2-core runner must not turn slowness into a
failure). ``dev`` (the local default) stays random, so local runs keep finding new examples.
``HYPOTHESIS_PROFILE=ci`` selects a profile explicitly. Tests that set ``max_examples`` themselves keep it.
"""

import os

from hypothesis import HealthCheck, settings

# One intra-op thread: the tiny model is ~10x faster and far steadier on 2 shared cores, and
# subprocesses (the KFP local runner, servers) inherit it. Set before anything imports torch.
os.environ.setdefault("OMP_NUM_THREADS", "1")

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=500,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=200, deadline=None)
# `make mutation` runs the tests once per mutant: the same few examples every time, so a verdict repeats.
settings.register_profile("mutation", derandomize=True, max_examples=50, deadline=None, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))

pytest_plugins = [
    "tests.fixtures.s3",
    "tests.fixtures.tiny_model",
    "tests.fixtures.synth",
    "tests.fixtures.sft",
    "tests.fixtures.eval",
    "tests.fixtures.sglang",
    "tests.fixtures.mlflow_server",
    "tests.fixtures.vllm_server",
    "tests.fixtures.rl",
    "tests.fixtures.agent",
    "tests.fixtures.gpu_check",
]
