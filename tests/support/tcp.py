"""TCP endpoints for tests: a free port pair on loopback and a TCP-configured install."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

from shared import homes
from shared.mesh_tcp import TCP_ENV
from shared.transport import curve_keys


def free_port_pair(host: str = "127.0.0.1") -> int:
    """A port P such that P and P+1 were both free a moment ago (control and events).

    Taken below the kernel's ephemeral range: a port from there (what binding port 0 gives)
    may be handed to any outgoing connection before the service binds it. Each parallel worker
    draws from its own slice, so two tests running at once never pick the same port."""
    low, high = worker_ports(os.environ, 10000, _ephemeral_low() - 2)
    for _ in range(200):
        port = random.randrange(low, high)
        with socket.socket() as first, socket.socket() as second:
            try:
                first.bind((host, port))
                second.bind((host, port + 1))
            except OSError:
                continue
            return port
    raise AssertionError("no free pair of TCP ports")


def worker_ports(env: dict[str, str] | os._Environ[str], low: int, high: int) -> tuple[int, int]:
    """The slice [low, high) of ports that this pytest-xdist worker (``PYTEST_XDIST_WORKER``
    ``gwN`` of ``PYTEST_XDIST_WORKER_COUNT``) draws from; the whole range outside a worker."""
    worker, count = env.get("PYTEST_XDIST_WORKER", ""), env.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 0):
        return low, high
    span = (high - low) // int(count)
    start = low + int(worker[2:]) * span
    return start, start + span


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default start


def tcp_env(name: str, port: int, host: str = "127.0.0.1") -> dict[str, str]:
    return {TCP_ENV: f"{name}=tcp://{host}:{port}"}


def keyed_install(root: Path) -> Path:
    """An install with every service's keys and its own client authorized."""
    root.mkdir(parents=True, exist_ok=True)
    curve_keys.init(root, [*homes.SERVICES])
    return root
