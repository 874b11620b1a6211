"""Help that teaches: every config field with its type, default, allowed values and one-line description;
each verb's own example; the benchmark list (each ``Benchmark`` says what it asks for);
``paravt config show STAGE``.

A field's description is its pydantic ``Field(description=...)``; every config field has one
(``tests/unit/test_config_descriptions.py``). Nothing here imports torch.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel

from paravt_core.config_base import union_models

# Each verb's own example (shown at the top of its --help epilog).
EXAMPLES: dict[str, str] = {
    "data": "paravt data --config configs/data/tiny.yaml\n"
    "  paravt data --config configs/data/paravt_source.yaml 'download.media_include=[museg/charades*]'",
    "sft": "paravt sft --config configs/sft/tiny.yaml trainer.steps=10\n"
    "  torchrun --nproc-per-node 8 -m paravt_core.cli sft --config configs/sft/qwen3vl_8b.yaml "
    "data=s3://bucket/data output=s3://bucket/sft",
    "rl": "paravt rl --config configs/rl/tiny.yaml paravt.preset=vanilla_grpo steps=2\n"
    "  paravt rl --config configs/rl/paragrpo_8b.yaml data=s3://bucket/data model=s3://bucket/sft/final",
    "eval": "paravt eval --config configs/eval/tiny.yaml 'protocols=[direct]'\n"
    "  paravt eval --config configs/eval/withtool.yaml model=ParaVT/ParaVT-8B --shard 0/4",
    "report": "paravt report --config configs/report/tiny.yaml title='my run'",
}


def field_description(model: type[BaseModel], name: str) -> str:
    """The field's one-line ``Field(description=...)`` (tests/unit/test_config_descriptions.py keeps every field
    carrying one)."""
    return model.model_fields[name].description or ""


def type_text(annotation: Any) -> tuple[str, list[Any]]:
    """(type name, allowed values) of an annotation: ``Literal`` gives its values, ``X | None`` says so."""
    origin = get_origin(annotation)
    if origin is Literal:
        return "choice", list(get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        inner, allowed = (
            type_text(args[0]) if len(args) == 1 else (" | ".join(type_text(a)[0] for a in args), [])
        )
        return (f"{inner} or null", allowed) if len(args) < len(get_args(annotation)) else (inner, allowed)
    if origin in (list, tuple):
        args = [type_text(a)[0] for a in get_args(annotation) if a is not Ellipsis]
        return f"{origin.__name__}[{', '.join(dict.fromkeys(args))}]", []
    if isinstance(annotation, type):
        return annotation.__name__, []
    return str(annotation).replace("typing.", ""), []


def _bounds(info: Any) -> str:
    parts = []
    for meta in info.metadata:
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            value = getattr(meta, attr, None)
            if value is not None:
                parts.append(f"{sign} {value}")
    return ", ".join(parts)


def _yaml_value(value: Any) -> str:
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("...").strip()


def describe_fields(model: type[BaseModel], prefix: str = "", values: BaseModel | None = None) -> list[str]:
    """Two lines per field for ``--help``: ``key.path = default   (type; allowed values)`` and its
    description. Nested sections are flattened; their defaults are the stage's (``values``)."""
    lines: list[str] = []
    for name, info in model.model_fields.items():
        key = f"{prefix}{info.alias or name}"
        default = getattr(values, name) if values is not None else info.get_default(call_default_factory=True)
        annotation = info.annotation
        if union_models(annotation):
            lines += _describe_kinds(union_models(annotation), key, default)
            continue
        if isinstance(default, BaseModel):
            lines += describe_fields(type(default), f"{key}.", default)
            continue
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            lines += describe_fields(annotation, f"{key}.")
            continue
        kind, allowed = type_text(annotation)
        extra = [kind]
        if allowed:
            extra.append("one of " + ", ".join(str(a) for a in allowed))
        if _bounds(info):
            extra.append(_bounds(info))
        lines.append(f"{key} = {_yaml_value(default)}   ({'; '.join(extra)})")
        text = field_description(model, name)
        if text:
            lines.append(f"    {text}")
    return lines


def _describe_kinds(models: list[type[BaseModel]], key: str, default: BaseModel) -> list[str]:
    """A section with one config class per ``kind``: the kinds, the default kind's fields at the stage's
    values, then each other kind's fields under a ``when KEY.kind=K:`` line."""
    kinds = [m.model_fields["kind"].default for m in models]
    lines = [
        f"{key}.kind = {default.kind}   (choice; one of {', '.join(kinds)})",
        f"    which one; each kind has its own fields: {default.kind}'s first, then the others'",
    ]
    ordered = [type(default)] + [m for m in models if not isinstance(default, m)]
    for model in ordered:
        values = default if model is type(default) else None
        own = describe_fields(model, f"{key}.", values)[2:]  # without its kind line (said above)
        if model is type(default):
            lines += own
        else:
            lines.append(f"  when {key}.kind={model.model_fields['kind'].default}:")
            lines += [f"    {line}" for line in own]
    return lines


def stage_epilog(stage: str, model: type[BaseModel]) -> str:
    fields = "\n".join(f"  {line}" for line in describe_fields(model))
    shorthands = getattr(model, "SHORTHANDS", {})
    also = "".join(f"  {short} = {full}\n" for short, full in shorthands.items())
    return (
        f"example:\n  {EXAMPLES.get(stage, '')}\n\n"
        "Every field below is a YAML key of --config or a dotted override KEY=VALUE (values read as YAML:\n"
        "4 is a number, [a, b] a list). `paravt config show "
        f"{stage}` prints the resolved config with these descriptions.\n\n"
        + (f"also accepted (YAML key or override; the same field):\n{also}\n" if also else "")
        + f"config fields (default, type, allowed values):\n{fields}"
    )


def config_show(model: type[BaseModel], cfg: BaseModel) -> str:
    """The resolved config as YAML, each key preceded by its description as a comment."""
    out: list[str] = []

    def walk(m: type[BaseModel], value: BaseModel, indent: int) -> None:
        pad = "  " * indent
        for name, info in m.model_fields.items():
            key = info.alias or name
            current = getattr(value, name)
            text = field_description(m, name)
            kind, allowed = type_text(info.annotation)
            note = f"{text} " if text else ""
            note += f"[{kind}{'; one of ' + ', '.join(map(str, allowed)) if allowed else ''}]"
            if isinstance(current, BaseModel):
                out.append(f"{pad}{key}:  # {note}" if text else f"{pad}{key}:")
                walk(type(current), current, indent + 1)
                continue
            out.append(f"{pad}# {note}")
            out.append(
                f"{pad}{key}: {_yaml_value(current if not isinstance(current, tuple) else list(current))}"
            )

    walk(model, cfg, 0)
    return "\n".join(out) + "\n"


def list_benchmarks() -> str:
    """``paravt eval --list-benchmarks``: name, source, split, answer types, ParaVT-8B's published number."""
    from paravt_core.eval import benchmarks as registry

    rows = [("name", "source (hf://...)", "split", "answers", "ParaVT-8B published")]
    for b in registry.REGISTRY.values():
        value = b.published.numbers.get("ParaVT-8B")
        rows.append(
            (
                b.name,
                b.hub_id or "(demo_data fixtures)",
                b.split or "-",
                b.answers,
                f"{value:.1f}" if value is not None else "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    text = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    text.append(
        "Published numbers: accuracy %, Charades mIoU, with the tool (the release's protocol: 64 frames, greedy, "
        "3 rounds x 5 calls)."
    )
    return "\n".join(text)
