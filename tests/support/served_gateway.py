"""A served profile as its process makes it, its sockets never opened: for tests that drive a
gateway through its own handlers and steps, in this process."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from services.gateway import profile_scope
from services.gateway.app import Gateway
from services.gateway.process import GatewayProcess
from services.gateway.state import GatewayState
from shared import homes
from shared.gateways import ops
from shared.identity import current_identity
from shared.locks import FileLock


@contextmanager
def served_gateway(home: Path, *, in_process: bool = True) -> Iterator[Gateway]:
    """The default profile of ``home`` served, its endpoint lock held; with ``in_process``, in a
    process of its own (``GatewayProcess``), as its turns need."""
    endpoint = homes.endpoint(home, ops.SERVICE)
    lock = FileLock(endpoint.lock_path)
    lock.acquire()
    try:
        state = GatewayState(current_identity(), "default", home, "unmanaged", None, "i1")
        served = Gateway(state, endpoint, lock, profile_scope.load("default", home))
        if in_process:
            served.process = GatewayProcess([served])
        yield served
    finally:
        lock.release()
