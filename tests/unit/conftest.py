"""The unit tier: pure rules. A test here that starts a process or opens a socket fails."""

from __future__ import annotations

import pytest

from tests.support.tiers import forbidden


@pytest.fixture(autouse=True)
def _no_process_and_no_socket(monkeypatch: pytest.MonkeyPatch):
    with forbidden(monkeypatch, "unit", sockets=True):
        yield
