"""Compile a named pipeline to KFP IR YAML."""

from __future__ import annotations

from pathlib import Path

from kfp import compiler


def pipelines() -> dict:
    from pipelines.nightly_eval import nightly_pipeline
    from pipelines.train import train_pipeline

    return {"train": train_pipeline, "nightly": nightly_pipeline}


def compile_pipeline(name: str, out: str) -> str:
    known = pipelines()
    if name not in known:
        raise ValueError(f"unknown pipeline {name!r}; known: {', '.join(sorted(known))}")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    compiler.Compiler().compile(known[name], package_path=out)
    return out
