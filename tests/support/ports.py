"""Free TCP ports on loopback, as the kernel hands them out: the one helper every test that starts a server uses.

A port is free when chosen and may be taken again before its server binds it; the tests accept that race (the
kernel cycles through the whole ephemeral range before it hands a port out twice)."""

from __future__ import annotations

import socket
from collections.abc import Collection


def free_port(*, avoid: Collection[int] = ()) -> int:
    """A port on 127.0.0.1 that is free right now, never one of ``avoid``."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in avoid:
            return port


def free_ports(n: int) -> list[int]:
    """``n`` different free ports: all held open while chosen, so none is handed out twice."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port_run(n: int) -> int:
    """A port ``p`` with ``p .. p + n - 1`` all free (a launcher that numbers its servers ``port + i``)."""
    for _ in range(100):
        base = free_port()
        try:
            for k in range(1, n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", base + k))
        except OSError:
            continue
        return base
    raise RuntimeError(f"no run of {n} free ports")
