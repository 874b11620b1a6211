"""Shared fixtures live in tests/fixtures/*; each module is registered here as a plugin."""

import os

# One intra-op thread: the tiny model is ~10x faster and far steadier on 2 shared cores, and
# subprocesses (the KFP local runner, servers) inherit it. Set before anything imports torch.
os.environ.setdefault("OMP_NUM_THREADS", "1")

pytest_plugins = [
    "tests.fixtures.s3",
    "tests.fixtures.tiny_model",
    "tests.fixtures.synth",
    "tests.fixtures.sft_media",
]
