"""Shared fixtures live in tests/fixtures/*; each module is registered here as a plugin."""

pytest_plugins = [
    "tests.fixtures.s3",
    "tests.fixtures.tiny_model",
    "tests.fixtures.synth",
]
