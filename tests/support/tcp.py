"""TCP endpoints for tests: a free port pair on loopback and a TCP-configured install."""

from __future__ import annotations

import socket
from pathlib import Path

from shared import curve_keys, homes
from shared.mesh_tcp import TCP_ENV


def free_port_pair(host: str = "127.0.0.1") -> int:
    """A port P such that P and P+1 were both free a moment ago (control and events)."""
    for _ in range(50):
        with socket.socket() as first, socket.socket() as second:
            first.bind((host, 0))
            port = first.getsockname()[1]
            if port >= 65534:
                continue
            try:
                second.bind((host, port + 1))
            except OSError:
                continue
            return port
    raise AssertionError("no free pair of TCP ports")


def tcp_env(name: str, port: int, host: str = "127.0.0.1") -> dict[str, str]:
    return {TCP_ENV: f"{name}=tcp://{host}:{port}"}


def keyed_install(root: Path) -> Path:
    """An install with every service's keys and its own client authorized."""
    root.mkdir(parents=True, exist_ok=True)
    curve_keys.init(root, [*homes.SERVICES])
    return root
