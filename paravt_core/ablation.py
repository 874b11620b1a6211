"""The ablation study: named recipe variants on one base RL config, and where each variant's outputs live.

A study file (``configs/ablations/paper.yaml``) lists variants. Each is a set of dotted ``key=value``
overrides in the stages' own grammar (``paravt rl --config base.yaml paravt.anchoring.weight=0``): RL
overrides applied on top of the base RL config (after the pipeline-wide ones), and eval overrides applied
on top of the shared eval config (only where the variant changes the protocol itself, e.g. sequential tool
calls). A variant with ``rl: false`` is the SFT checkpoint evaluated as it is (the "SFT only" row). Each row
carries the paper's numbers, ``None`` where the paper gives none.

Layout under a run's root (``components/locations.py``)::

    data/  sft/                                 shared: data and SFT run once
    ablations/<variant>/rl/                     the variant's RL stage (metrics.json: f_tau, kappa, curve)
    ablations/<variant>/eval/<benchmark>/       the variant's eval of one benchmark
    ablations/report/                           the comparison report
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from pydantic import Field, field_validator, model_validator

from paravt_core import storage
from paravt_core.config_base import StrictModel

# Names become path segments and KFP loop items: keep them plain.
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
PAIR_SEP = "::"  # "<variant>::<benchmark>": one item of the eval fan-out
PAPER_KEYS = ("f_tau", "kappa")  # training-time columns; the others are benchmark names


class AblationVariant(StrictModel):
    name: str = Field(description="row name; also the directory ablations/<name>")
    description: str = Field(default="", description="what the row changes, one line")
    rl: bool = Field(default=True, description="train RL for this row (false: evaluate the SFT checkpoint)")
    rl_overrides: list[str] = Field(
        default_factory=list, description="dotted overrides on the base RL config"
    )
    eval_overrides: list[str] = Field(
        default_factory=list, description="dotted overrides on the eval config (protocol changes only)"
    )
    paper: dict[str, float | None] = Field(
        default_factory=dict, description="the paper's value per column (f_tau, kappa, benchmark names)"
    )

    @field_validator("name")
    @classmethod
    def _plain(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"variant name {value!r}: lower-case letters, digits, '_' and '-' only")
        return value

    @field_validator("rl_overrides", "eval_overrides")
    @classmethod
    def _dotted(cls, value: list[str]) -> list[str]:
        bad = [o for o in value if "=" not in o]
        if bad:
            raise ValueError(f"overrides must be key=value: {bad}")
        return value


class AblationStudy(StrictModel):
    """A study file: the variants, the benchmarks they are compared on, where the paper's numbers come from."""

    title: str = Field(default="ParaVT ablations", description="report title")
    source: str = Field(default="", description="citation of the paper's numbers")
    protocol: str = Field(
        default="agentic", description="eval protocol whose headline fills the benchmark columns"
    )
    benchmarks: list[str] = Field(
        default_factory=lambda: ["videomme", "videomme_wsub", "lvbench", "mlvu"],
        min_length=1,
        description="benchmark columns (eval benchmark names)",
    )
    variants: list[AblationVariant] = Field(min_length=1, description="the rows, in report order")

    @model_validator(mode="after")
    def _unique(self) -> AblationStudy:
        names = [v.name for v in self.variants]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"variant names repeat: {dup}")
        return self

    def variant(self, name: str) -> AblationVariant:
        for v in self.variants:
            if v.name == name:
                return v
        raise ValueError(f"unknown variant {name!r}; the study has: {', '.join(self.names())}")

    def names(self) -> list[str]:
        return [v.name for v in self.variants]


def load_study(text: str) -> AblationStudy:
    """A study from YAML text (the pipeline passes the file's text as a parameter)."""
    return AblationStudy.model_validate(yaml.safe_load(text) or {})


def load_study_file(path: str | Path) -> AblationStudy:
    return load_study(Path(path).read_text())


def variant_root(run_root: str, name: str) -> str:
    return storage.join(run_root, "ablations", name)


def rl_output(run_root: str, name: str) -> str:
    return storage.join(variant_root(run_root, name), "rl")


def eval_prefix(run_root: str, name: str) -> str:
    return storage.join(variant_root(run_root, name), "eval")


def report_output(run_root: str) -> str:
    return storage.join(run_root, "ablations", "report")


def sft_final(run_root: str) -> str:
    return storage.join(run_root, "sft", "final")


def shared_data(run_root: str) -> str:
    """The data stage's output the shared SFT trained on, as its resolved ``config.yaml`` records it
    (``data.input``): the data stage writes wherever its config says, not always ``<root>/data``."""
    recorded = yaml.safe_load(storage.read_bytes(storage.join(run_root, "sft", "config.yaml")))
    return str(recorded["data"]["input"])


def variant_model(run_root: str, variant: AblationVariant) -> str:
    """The checkpoint a variant's evals read: its RL stage's final model, or the SFT one (``rl: false``)."""
    if variant.rl:
        return storage.join(rl_output(run_root, variant.name), "final")
    return sft_final(run_root)


def rl_overrides(study: AblationStudy, name: str, pipeline_overrides: list[str]) -> list[str]:
    """The RL overrides of one row: the pipeline-wide ones first, then the variant's (later keys win)."""
    return [*pipeline_overrides, *study.variant(name).rl_overrides]


def eval_overrides(study: AblationStudy, name: str, pipeline_overrides: list[str]) -> list[str]:
    return [*pipeline_overrides, *study.variant(name).eval_overrides]


def eval_pairs(variants: list[str], benchmarks: list[str]) -> list[str]:
    """One ``variant::benchmark`` item per eval task, variants in order."""
    return [f"{v}{PAIR_SEP}{b}" for v in variants for b in benchmarks]


def split_pair(item: str) -> tuple[str, str]:
    variant, sep, benchmark = item.partition(PAIR_SEP)
    if not sep or not variant or not benchmark:
        raise ValueError(f"expected 'variant{PAIR_SEP}benchmark', got {item!r}")
    return variant, benchmark
