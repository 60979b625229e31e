"""How a command gets its client of a service's control socket: through here, and only here.

By default that is a real connection (``shared.transport.connect``). A test may serve an
endpoint in this process instead (``served_in_process``): every client of that endpoint then
calls the service's own handlers through an ``InProcessTransport``, with the same frames,
checks, retries and typed errors, and no socket.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from shared import protocol, transport
from shared.transport import NO_RETRY

if TYPE_CHECKING:
    from shared.homes import Endpoint
    from shared.transport import Service, SyncClient

# Control address -> the service answering it in this process.
_served: dict[str, Service] = {}


def connect(endpoint: Endpoint, **options: Any) -> SyncClient:
    """A client of ``endpoint``'s control socket; ``options`` are ``SyncClient``'s."""
    service = _served.get(endpoint.control)
    if service is None:
        return transport.connect(endpoint, **options)
    # trio comes with it: only when a test serves in process
    in_process = transport.InProcessTransport(service, max_frame=options.get("max_frame", protocol.MAX_FRAME_BYTES))
    return transport.SyncClient(endpoint.control, transport=in_process, **options)


def answers(endpoint: Endpoint, timeout: float = 1.0) -> bool:
    """Whether a service answers a HELLO at ``endpoint`` (``shared.transport.answers``)."""
    return transport.says_hello(connect(endpoint, retry=NO_RETRY), timeout)


@contextmanager
def served_in_process(endpoint: Endpoint, service: Service) -> Iterator[Service]:
    """Within the block, every client of ``endpoint`` calls ``service`` in this process."""
    if endpoint.control in _served:
        raise ValueError(f"{endpoint.control} is already served in process")
    _served[endpoint.control] = service
    try:
        yield service
    finally:
        del _served[endpoint.control]
