"""Services served in this process, for tests of what a command makes of their answers.

The fixture ``in_process`` puts a service's own handlers behind an endpoint for one test:
every client a command makes of that endpoint (``hermes_cli.service_client``) calls them
through ``shared.transport.in_process.InProcessTransport``, with the real frames and no socket. Run
the command with ``tests.support.cli.hermes_in_process``: a command in a child process
would not see them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest

from hermes_cli.service_client import served_in_process
from shared.homes import Endpoint
from shared.transport.service import Service


@pytest.fixture
def in_process() -> Iterator[Callable[[Endpoint, Service], Service]]:
    """``in_process(endpoint, service)``: ``service`` answers ``endpoint`` until the test ends."""
    with contextlib.ExitStack() as stack:
        yield lambda endpoint, service: stack.enter_context(served_in_process(endpoint, service))
