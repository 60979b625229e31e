"""A sign-in against a portal that is not there says it is retrying, and why, each time it
waits to ask again, then fails typed."""

from __future__ import annotations

import pytest

from nous.portal_errors import PortalUnreachable
from services.auth_worker import device_flow
from services.auth_worker.states import Reason
from tests.support.sign_ins import request, sign_in

pytestmark = pytest.mark.root(profiles=("work",))


async def test_a_portal_that_is_not_there_is_retried_visibly_then_fails_typed(root, monkeypatch):
    monkeypatch.setattr(device_flow, "DEVICE_CODE_BUDGET", 2.0)

    class Gone:
        url = "http://127.0.0.1:9"  # discard: nothing listens

    seen, terminal = await sign_in(request(root, Gone))
    assert (terminal.name, terminal.reason) == ("Failed", Reason.PORTAL_UNREACHABLE)
    assert seen and {s.name for s in seen} == {"Retrying"}  # no code was ever shown
    assert [s.attempt for s in seen] == list(range(1, len(seen) + 1))
    assert [s.retry_in for s in seen[:2]] == [0.5, 1.0][: len(seen)]
    assert {s.reason for s in seen} == {PortalUnreachable.CONNECTION_REFUSED}
    assert "refused the connection" in seen[0].copy_terminal
