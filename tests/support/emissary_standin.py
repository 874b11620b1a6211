"""A stand-in for Argo's emissary, PID 1 of a step's main container (run it in a PID namespace:
``unshare --pid --fork --mount-proc``): it starts the command in its own process group, passes SIGTERM to
that group, polls for its child once a second and exits when the child is gone, and the kernel then kills
whatever is left in the namespace (the step, orphaned when KFP's launcher died).

Argo v4.0.5: ``cmd/argoexec/commands/emissary.go`` forwards each signal it gets to the command with
``osspecific.Kill``, which signals the process group (``workflow/executor/osspecific/signal_darwin.go``,
linked as ``signal_linux.go``); ``osspecific.StartCommand`` sets ``Setpgid`` (``command_unix.go``); ``Wait``
reaps any child with ``Wait4(-1, WNOHANG)`` and sleeps one second between tries, returning once the command
itself is reaped. The polls here are on a fixed one-second grid from the time written to TICKFILE
(``time.monotonic()``, the same clock in every process), so a test can place a signal a known time before
a poll.

    python tests/support/emissary_standin.py TICKFILE -- COMMAND...
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def main() -> None:
    tickfile, sep, *command = sys.argv[1:]
    assert sep == "--", "usage: emissary_standin.py TICKFILE -- COMMAND..."
    child = subprocess.Popen(command, process_group=0)
    signal.signal(signal.SIGTERM, lambda signum, frame: os.killpg(child.pid, signum))
    start = time.monotonic()
    Path(tickfile + ".tmp").write_text(repr(start))
    os.replace(tickfile + ".tmp", tickfile)  # whole or absent for the reader
    tick = 0
    while True:
        while True:  # every child that has exited (orphans come to PID 1)
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid, status = child.pid, 0
            if pid == 0:
                break
            if pid == child.pid:
                code = os.waitstatus_to_exitcode(status)
                sys.exit(128 - code if code < 0 else code)  # killed by a signal: 128 + its number
        tick += 1
        time.sleep(max(0.0, start + tick - time.monotonic()))


if __name__ == "__main__":
    main()
