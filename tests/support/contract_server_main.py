"""The loopback SGLang contract server (``tests/support/sglang_contract_server._ContractServer``) as a process, the way
``rl.launch`` starts a server: ``python tests/support/contract_server_main.py MODEL_DIR PORT [AGENT_MAX_PIXELS
AGENT_MIN_PIXELS]``; serves the tiny model until SIGTERM, then writes its calls to
``$PARAVT_CONTRACT_LOG`` (one JSON line per call) when set. ``$PARAVT_CONTRACT_DELAY_S``: every ``/generate``
waits that long first (requests stay in flight long enough to kill the server under them)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from paravt_core.engines.sglang_engine import mm_process_config  # noqa: E402
from paravt_core.engines.transformers_engine import TransformersEngine  # noqa: E402
from paravt_core.models import load  # noqa: E402
from tests.support.sglang_contract_server import _ContractServer


def main() -> None:
    model_dir, port = sys.argv[1], int(sys.argv[2])
    mm = (
        mm_process_config(max_pixels=int(sys.argv[3]), min_pixels=int(sys.argv[4]))
        if len(sys.argv) > 4
        else None
    )
    served = load(model_dir)
    server = _ContractServer(
        TransformersEngine(served.model, served.processor),
        served.processor,
        mm_config=mm,
        port=port,
        model_path=str(Path(model_dir).resolve()),
        delay_s=float(os.environ.get("PARAVT_CONTRACT_DELAY_S") or 0.0),
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    server.close()
    log = os.environ.get("PARAVT_CONTRACT_LOG")
    if log:
        with open(log, "w") as f:
            for path, body in server.calls:
                f.write(json.dumps({"path": path, "body": body}) + "\n")


if __name__ == "__main__":
    main()
