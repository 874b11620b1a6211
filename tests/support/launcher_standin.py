"""A stand-in for KFP 2.17's launcher in a multi-node step's pod: it runs the step as its child, reads the
child's stdout through a pipe and relays it (PUBLISH_LOGS=true; backend/src/v2/component/launcher_v2.go
runs the user command with its output copied to the log), and has no signal handling, so SIGTERM kills it
at once (a Go program's default). Its death closes the pipe: the child's next write fails with EPIPE.

    python tests/support/launcher_standin.py PIDFILE -- python -m ...   # PIDFILE: where the child's pid goes
"""

from __future__ import annotations

import subprocess
import sys


def main() -> None:
    pidfile, sep, *command = sys.argv[1:]
    assert sep == "--", "usage: launcher_standin.py PIDFILE -- COMMAND..."
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    with open(pidfile, "w") as f:
        f.write(str(child.pid))
    assert child.stdout is not None
    for line in child.stdout:  # relayed as the launcher does, line by line
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
    sys.exit(child.wait())


if __name__ == "__main__":
    main()
