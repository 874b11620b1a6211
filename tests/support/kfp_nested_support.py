"""A loop nested in another, for tests/e2e/test_pipeline_ablations.py (kept here because KFP reads the components'
type annotations at decoration time, which ``from __future__ import annotations`` would turn into strings)."""

from kfp import dsl


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def outer(v: str) -> str:
    return f"model-of-{v}"


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def inner(model: str, variant: str, bench: str) -> str:
    return f"{model}|{variant}|{bench}"


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def gather(items: list) -> list:
    return items


@dsl.pipeline
def nested_pipeline(variants: list = ["v1", "v2"], benches: list = ["b1"]) -> list:  # noqa: B006
    with dsl.ParallelFor(variants) as v:
        t = outer(v=v)
        with dsl.ParallelFor(benches) as b:
            e = inner(model=t.output, variant=v, bench=b)
    return gather(items=dsl.Collected(e.output)).output
