"""What every stage shares: the result type and the lifecycle of one run on one output (:class:`StageRun`).

Every stage's ``run`` follows the same steps, in this order::

    StageRun.open      refuse another stage's complete output, before anything is read
    reusable / reused  a complete output made with this config is returned as it is (``reused_output``);
                       a changed one is refused, continued (``may_grow``) or redone, by the stage's rule
    begin              clear ``_COMPLETE`` (the outputs are rewritten from here on), save ``config.yaml``
    ...                the stage's own work
    done               write ``_COMPLETE`` last and return the result

A body that raises never reaches ``done``: its output is left without ``_COMPLETE``."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel
from rich.console import Console
from rich.syntax import Syntax

from paravt_core import storage
from paravt_core.config import config_to_yaml

# Logs of pipeline pods and CI are not terminals; rich would wrap tables at 80 columns there. soft_wrap:
# a one-line message (a path, a "reused" note) stays one line, never broken by rich at the width.
console = Console(stderr=True, width=None if sys.stderr.isatty() else 120, soft_wrap=True)


@dataclass
class StageResult:
    """Outputs (name -> URI) and small metrics of one stage run."""

    stage: str
    outputs: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"stage": self.stage, "outputs": self.outputs, "metrics": self.metrics}, indent=2)


def check_output(stage: str, output: str) -> None:
    """The first thing every stage's ``run`` does, however it was started (``paravt <stage>``, a pipeline
    component, a test): refuse an ``output`` that holds another stage's complete result, before anything is
    read, trained or written there. One line (``UsageError``: the CLI ends with status 2)."""
    from paravt_core.cli_errors import check_output_owner

    check_output_owner(stage, output)


# Fields that say where or how a run happens, not what it computes: a change in them leaves a complete output
# valid (scratch space, cadence of checkpoints, the rollout engine's plumbing, the cluster launch, timeouts).
RUN_ONLY_FIELDS = (
    "output",
    "work_dir",
    "launch.",
    "engine.",
    "checkpoint.",
    "engine_batch_size",  # what older outputs call engine.max_batch
    "data.num_workers",
    "data.prefetch_factor",
    "train.dist_timeout_s",
    "train.follower_wait_s",
    "tracking.",
)


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flat(item, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: value}


def same_location(a: str, b: str) -> bool:
    """``a`` and ``b`` name the same place: local paths (``file://``, ``~`` too) compared as resolved
    (relative vs absolute, ``a/./b``, through a symlink: ``demo-out/run/sft/final`` from the repository root is
    ``<root>/demo-out/run/sft/final``), URIs as written (a trailing ``/`` aside). A hub id (``owner/name``)
    is compared as a relative path: equal ids are the same place."""

    def where(uri: str) -> str:
        uri = uri.removeprefix("file://")
        if "://" in uri:
            return uri.rstrip("/")
        return os.path.realpath(os.path.expanduser(uri))

    return where(a) == where(b)


def _same_value(old: Any, new: Any) -> bool:
    """Equal, or two spellings of one location (:func:`same_location`): a config saved by the pipeline holds
    absolute paths where the YAML a user runs holds relative ones."""
    if old == new:
        return True
    return isinstance(old, str) and isinstance(new, str) and bool(old and new) and same_location(old, new)


def config_changes(output: str, cfg: BaseModel) -> dict[str, tuple[Any, Any]]:
    """Dotted key -> (saved, now) for every field of ``cfg`` that differs from the ``config.yaml`` the run
    in ``output`` saved (fields in ``RUN_ONLY_FIELDS`` aside); empty when nothing differs or nothing was saved."""
    import yaml

    uri = storage.join(output, "config.yaml")
    if not storage.exists(uri):
        return {}
    saved = _flat(yaml.safe_load(storage.read_bytes(uri)) or {})
    now = _flat(yaml.safe_load(config_to_yaml(cfg)) or {})
    return {
        key: (saved.get(key), now.get(key))
        for key in sorted(set(saved) | set(now))
        if not key.startswith(RUN_ONLY_FIELDS) and not _same_value(saved.get(key), now.get(key))
    }


def refuse_changed_config(
    stage: str, output: str, cfg: BaseModel, *, may_grow: tuple[str, ...] = ()
) -> dict[str, tuple[Any, Any]]:
    """The rule for a complete output rerun with another config: continue it where that means something
    (``may_grow``: numeric fields such as RL's ``steps`` that a rerun may raise; the run resumes from its
    newest checkpoint), otherwise refuse, naming each differing key (``UsageError``: exit status 2). A complete
    output is never silently reused for a config it was not made with. Returns the grown fields (key ->
    (saved, now)): empty when the output is not complete or its config is the same."""
    from paravt_core.cli_errors import UsageError

    if not storage.is_complete(output):
        return {}
    changes = config_changes(output, cfg)
    grown = {
        k: v
        for k, v in changes.items()
        if k in may_grow and isinstance(v[0], int | float) and isinstance(v[1], int | float) and v[1] > v[0]
    }
    refused = {k: v for k, v in changes.items() if k not in grown}
    if refused:
        listed = ", ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in refused.items())
        raise UsageError(
            f"{output} is a complete {stage} output made with a different config ({listed}); "
            "use another output= (or delete this one) to run this config"
        )
    return grown


def announce_config(stage: str, cfg: BaseModel, output_uri: str) -> None:
    """Save the resolved config as ``config.yaml`` beside the stage outputs and say where, in one line; the
    whole config is printed only with ``PARAVT_SHOW_CONFIG=1`` (``paravt config show STAGE`` prints it too)."""
    text = config_to_yaml(cfg)
    uri = storage.join(output_uri, "config.yaml")
    storage.write_bytes(uri, text.encode())
    if os.environ.get("PARAVT_SHOW_CONFIG", "").strip() not in ("", "0", "false"):
        console.rule(f"paravt {stage}: resolved config")
        console.print(Syntax(text, "yaml", theme="ansi_dark", background_color="default"))
    console.print(f"paravt {stage}: resolved config saved to {uri}", highlight=False)


def is_rank0() -> bool:
    """This process is rank 0 of ``torchrun`` (or runs alone): the one that prints and writes the outputs."""
    return int(os.environ.get("RANK", "0")) == 0


@dataclass
class StageRun:
    """One run of ``stage`` on ``output``: the lifecycle every stage's ``run`` goes through (module docstring).

    ``lead``: this process prints the stage's lines and writes the outputs (only rank 0 of a ``torchrun``
    job does; the other ranks take the same decisions and return the same results). ``complete``: the
    output was complete when the run opened it. ``grown``: the ``may_grow`` fields a rerun raised (key ->
    (saved, now)), set by :meth:`reusable`. ``console``: where the stage's lines go (its module's, which its
    tests may replace)."""

    stage: str
    output: str
    lead: bool = True
    complete: bool = False
    grown: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    console: Console = field(default_factory=lambda: console, repr=False)

    @classmethod
    def open(cls, stage: str, output: str, *, lead: bool = True, absolute: bool = False) -> StageRun:
        """Start a run: :func:`check_output` first, before anything is read. ``absolute``: a local ``output``
        is named by its absolute path from here on (in messages, results and the outputs)."""
        check_output(stage, output)
        if absolute and not storage.is_s3(output):
            output = os.path.abspath(output)
        return cls(stage, output, lead=lead, complete=storage.is_complete(output))

    def reusable(
        self,
        cfg: BaseModel,
        *,
        may_grow: tuple[str, ...] = (),
        on_change: Literal["refuse", "redo"] = "refuse",
    ) -> bool:
        """Whether the complete output was made with ``cfg`` and is returned as it is (:meth:`reused`).
        A complete output made with another config is, by ``on_change``: ``"refuse"``d naming each differing
        key (:func:`refuse_changed_config`; raises ``UsageError``) unless only ``may_grow`` fields grew (then
        :attr:`grown` names them and the run continues), or ``"redo"``ne (the stage runs again over it)."""
        if on_change == "refuse":
            self.grown = refuse_changed_config(self.stage, self.output, cfg, may_grow=may_grow)
            return self.complete and not self.grown
        return self.complete and not config_changes(self.output, cfg)

    def reused(self, outputs: dict[str, str], metrics: dict[str, Any], *, message: str = "") -> StageResult:
        """The result of a complete output reused as it is, said in one line (``message``, or the usual
        "is complete with the same config" line); its ``metrics`` carry ``reused_output: True``."""
        if self.lead:
            same = (
                f"paravt {self.stage}: {self.output} is complete with the same config; reused, nothing to do"
            )
            self.console.print(message or same, highlight=False)
        return StageResult(self.stage, outputs, {**metrics, "reused_output": True})

    def begin(self, cfg: BaseModel, *, root: str = "") -> None:
        """From here on the outputs under ``root`` (default: the output) are rewritten: their ``_COMPLETE``
        goes first, so a crash midway never leaves them looking complete, then the config is saved
        (:func:`announce_config`)."""
        root = root or self.output
        if not self.lead:
            return
        if storage.is_complete(root):
            storage.clear_complete(root)  # trusted again only when this run has finished
        announce_config(self.stage, cfg, root)

    def done(
        self, outputs: dict[str, str], metrics: dict[str, Any], *, root: str = "", **info: Any
    ) -> StageResult:
        """Every output under ``root`` (default: the output) is written: mark them complete (``_COMPLETE``
        holds the stage's name and ``info``) and return the result."""
        if self.lead:
            storage.mark_complete(root or self.output, {"stage": self.stage, **info})
        return StageResult(self.stage, outputs, metrics)
