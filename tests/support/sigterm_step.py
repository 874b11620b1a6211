"""The multi-node step as it runs under KFP's launcher, for the SIGTERM tests: ``launch_stage`` against the
API emulator at ``host`` (a kubeconfig), printing through the default log (stdout).

    python -m tests.support.sigterm_step KUBECONFIG NAMESPACE RUN_ID [POLL_S]
"""

from __future__ import annotations

import os
import sys

from paravt_core.launch.trainjob import NodeSpec, launch_stage


def main() -> None:
    kubeconfig, namespace, run_id = sys.argv[1:4]
    poll_s = float(sys.argv[4]) if len(sys.argv) > 4 else 0.05
    os.environ["KUBECONFIG"] = kubeconfig
    launch_stage(
        "sft",
        "output: s3://bucket/runs/x/sft\nlaunch:\n  nodes: 2\n",
        run_id=run_id,
        nodes=2,
        gpus_per_node=8,
        api="trainjob",
        spec=NodeSpec(image="registry/paravt-sft:1"),
        namespace=namespace,
        poll_s=poll_s,
    )


if __name__ == "__main__":
    main()
