"""A free TCP port on loopback, for a process about to listen there (a rank's rendezvous, a fake service)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now; the caller's process binds it next (another could, in between)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
