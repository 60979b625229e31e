"""How parallel workers (pytest-xdist) share the suite.

Two rules. The host tiers, and the tests marked ``host``, are one group: one worker runs them,
one at a time, so two of them never run at once (each checks the host unchanged after it).
The fast tiers' tests are handed out a module at a time: one takes milliseconds, and handed out
one by one they would leave the workers waiting on the controller. Every other test is handed
out alone, to whichever worker is free.
"""

from __future__ import annotations

import pytest
from xdist.scheduler import LoadGroupScheduling

HOST_TIERS = frozenset({"systemd", "containers"})  # a systemd or a podman of their own
FAST_TIERS = ("tests/unit/", "tests/service/")
HOST_GROUP = "host"


def in_host_group(item: pytest.Item) -> bool:
    return item.path.parent.name in HOST_TIERS or item.get_closest_marker("host") is not None


class TierScheduling(LoadGroupScheduling):
    """xdist's ``loadgroup`` (a test's ``xdist_group`` is one unit of work, for one worker), with
    each module of the fast tiers one unit too."""

    def _split_scope(self, nodeid: str) -> str:
        group = super()._split_scope(nodeid)
        if group == nodeid and nodeid.startswith(FAST_TIERS):
            return nodeid.split("::", 1)[0]
        return group
