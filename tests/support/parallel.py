"""How parallel workers (pytest-xdist) share the suite: which tests go to one worker together,
as one unit of work, decided from each test's node id (the controller hands out work without
collecting the tests itself).

- The host tiers, and the modules in ``HOST_MODULES``, are one unit: one worker runs them, one
  at a time, so two of them never run at once (each host tier checks the host unchanged after it).
- The operator tool modules are one unit: the last of them checks every error code that all of
  them produced in this process.
- A module that defines a module-scoped fixture is one unit, so the fixture is made once, not
  once per worker.
- A module of the fast tiers is one unit: its tests take milliseconds, and handed out one by one
  they would leave the workers waiting on the controller.
- Every other test is a unit alone, for whichever worker is free.
"""

from __future__ import annotations

import functools
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

from tests.support.processes import ROOT

HOST_TIERS = ("tests/systemd/", "tests/containers/")  # a systemd or a podman of their own
# `ip netns add` mounts on the host, which the host tiers check unchanged.
HOST_MODULES = ("tests/e2e/test_two_hosts.py", "tests/e2e/test_many_hosts.py")
FAST_TIERS = ("tests/unit/", "tests/service/")
HOST = "host"
OPERATOR_TOOLS = "operator-tools"
OPERATOR_TOOL_MODULES = tuple(
    f"tests/e2e/test_operator_tools{suffix}.py" for suffix in ("", "_cli", "_guard", "_start")
)


def unit_of(nodeid: str) -> str:
    """The unit of work the test ``nodeid`` is handed out in."""
    module = nodeid.split("::", 1)[0]
    if module.startswith(HOST_TIERS) or module in HOST_MODULES:
        return HOST
    if module in OPERATOR_TOOL_MODULES:
        return OPERATOR_TOOLS
    if module.startswith(FAST_TIERS) or _has_module_fixture(module):
        return module
    return nodeid


@functools.cache
def _has_module_fixture(module: str) -> bool:
    path = ROOT / module
    return path.is_file() and 'scope="module"' in Path(path).read_text()


class TierScheduling(LoadScopeScheduling):
    """xdist's ``loadscope`` (a unit goes whole to one worker, the largest first) with the units
    ``unit_of`` makes."""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)
