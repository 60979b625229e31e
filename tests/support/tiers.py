"""What a tier forbids, enforced: a test of the unit tier that starts a process or opens a
socket fails, and so does a test of the service tier that starts a process."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import zmq


def _refuse(what: str, tier: str):
    def refused(*args: object, **kwargs: object) -> None:
        pytest.fail(f"a {tier} test {what}: that belongs in a later tier (the tiers: docs/testing.md)", pytrace=True)

    return refused


@contextmanager
def forbidden(monkeypatch: pytest.MonkeyPatch, tier: str, *, sockets: bool) -> Iterator[None]:
    """Within the block, starting a process fails the test, and opening a socket too when
    ``sockets`` is set."""
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("started a process", tier))
    monkeypatch.setattr(os, "fork", _refuse("forked", tier))
    if sockets:
        monkeypatch.setattr(socket.socket, "__init__", _refuse("opened a socket", tier))
        monkeypatch.setattr(zmq.Context, "socket", _refuse("opened a zmq socket", tier))
    yield
