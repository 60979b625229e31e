"""The hook client's rules that need no socket: where its intake is, and that its counters
are a copy."""

from __future__ import annotations

import pytest

from shared import homes
from shared.hooks import intake_address
from tests.support.hook_reports import counts

pytestmark = pytest.mark.root(run_dir=True)


# --- where the reports go -------------------------------------------------------------------


def test_the_intake_is_beside_the_reporters_control_socket(root, intake):
    assert intake_address(root) == intake
    assert homes.endpoint(root, "hook_reporter", create=False).control == intake.removesuffix(".in") + ".ctl"


def test_counters_are_a_copy(hook_client, root):
    client = hook_client({}, root)
    client.counters()["sent"] = 99
    assert client.counters() == counts()
