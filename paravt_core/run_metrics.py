"""Per-step metric files shared by the training stages (SFT, RL): ``metrics.jsonl`` and PNG curves."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any

from paravt_core import storage


def jsonl(records: Sequence[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in records).encode()


def write_jsonl(uri: str, records: Sequence[dict[str, Any]]) -> None:
    """Rewrite the whole file atomically (a resumed run drops the steps a killed run logged after its
    last checkpoint)."""
    storage.write_bytes(uri, jsonl(records))


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the file-only Agg backend (stages run headless)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure_png(fig: Any, dpi: int = 100) -> bytes:
    """The figure as PNG bytes (closed afterwards), ready for ``storage.write_bytes``."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    pyplot().close(fig)
    return buf.getvalue()
