"""What every stage shares: the result type and the start-of-stage ritual (print + save config)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from rich.console import Console
from rich.syntax import Syntax

from paravt_core import storage
from paravt_core.config import config_to_yaml

# Logs of pipeline pods and CI are not terminals; rich would wrap tables at 80 columns there.
console = Console(stderr=True, width=None if sys.stderr.isatty() else 120)


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
