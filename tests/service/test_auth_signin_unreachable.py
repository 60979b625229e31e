"""A sign-in against a portal that is not there fails typed."""

from __future__ import annotations

import pytest

from services.auth_worker import device_flow
from services.auth_worker.states import Reason
from tests.support.sign_ins import request, sign_in

pytestmark = pytest.mark.root(profiles=("work",))


async def test_a_portal_that_is_not_there_fails_typed(root, monkeypatch):
    monkeypatch.setattr(device_flow, "DEVICE_CODE_BUDGET", 1.0)

    class Gone:
        url = "http://127.0.0.1:9"  # discard: nothing listens

    _, terminal = await sign_in(request(root, Gone))
    assert (terminal.name, terminal.reason) == ("Failed", Reason.PORTAL_UNREACHABLE)
