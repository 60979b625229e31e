"""The watchdog of a gateway's unit, against a real systemd 252: a gateway whose trio loop is
blocked stops feeding it, and systemd kills it and starts a new one.

The loop is blocked by a real turn: the gateway's fault pause at a turn's start
(``gateway:turn:default``, set for the unit alone in a drop-in) holds its loop's thread synchronously,
as a hung call on the loop would. The bound is the issue's: ``WatchdogSec`` + ``RestartSec``,
plus a named margin for the new interpreter to start and say it is ready."""

from __future__ import annotations

import sys
import time

import pytest

from fleet.supervisors.systemd import unit_name
from fleet.supervisors.systemd.units import RESTART_DELAY
from shared.faults import ENV as PAUSE_ENV

pytestmark = pytest.mark.systemd

WATCHDOG = 3  # seconds: short, so the test is; the default is 30
# The new gateway's start, from systemd's fork to READY=1: an interpreter importing trio, zmq
# and the gateway on a loaded 2-core machine (about 1 s idle here), with room to spare.
START_MARGIN = 30.0
BOUND = WATCHDOG + RESTART_DELAY + START_MARGIN
SHOWN = ("MainPID", "NRestarts", "ActiveState", "SubState", "WatchdogUSec")
# A turn sent to the gateway from inside the sandbox; its client gives up on its own.
TURN = """
from shared import homes
from shared.gateways import ops
from shared.transport import SyncClient
endpoint = homes.endpoint(homes.root_home(), ops.SERVICE, create=False)
with SyncClient(endpoint.control) as client:
    client.call(ops.TURN, {"text": "hang here", "seconds": 0}, timeout=2.0)
"""


def test_a_gateway_whose_loop_hangs_is_restarted_by_its_watchdog(installs, sandbox):
    ours = installs("watched")
    ours.unit("default", "system", "--watchdog", str(WATCHDOG), start=False)
    ours.drop_in("default", "hang", {PAUSE_ENV: "gateway:turn:default"})
    ours.start("default")
    before = ours.show("default", *SHOWN)
    assert before["WatchdogUSec"] == f"{WATCHDOG}s" and before["SubState"] == "running", before
    # Fed from its loop: alive well past the watchdog's bound while nothing blocks the loop.
    time.sleep(2 * WATCHDOG)
    assert ours.show("default", *SHOWN) == before
    cursor = sandbox.cursor()

    hung_at = time.monotonic()
    sent = sandbox.run([sys.executable, "-c", TURN], env=ours.env(), cwd=ours.path, timeout=60, check=False)
    assert sent.returncode != 0, sent.stdout  # no answer: its loop is held
    after = before
    while time.monotonic() - hung_at < BOUND:
        after = ours.show("default", *SHOWN)
        restarted = int(after["NRestarts"]) > int(before["NRestarts"])
        if restarted and after["SubState"] == "running" and after["MainPID"] != before["MainPID"]:
            break
        time.sleep(0.1)
    took = time.monotonic() - hung_at
    print(f"watchdog restart: a new gateway running {took:.2f}s after its loop was blocked (bound {BOUND:g}s)")

    assert int(after["NRestarts"]) == int(before["NRestarts"]) + 1, after
    assert after["SubState"] == "running" and after["MainPID"] != before["MainPID"], after
    assert took < BOUND
    assert ours.answering()["default"]["pid"] == int(after["MainPID"])  # the new one serves
    said = ours.journal("default", after=cursor)
    assert "paused gateway:turn:default" in said  # the turn reached the pause, on the loop
    unit = unit_name("default")
    assert f"{unit}: Watchdog timeout (limit {WATCHDOG}s)!" in said, said
    assert f"{unit}: Failed with result 'watchdog'." in said, said
    # Its last words: the stack of the hung loop, from the watchdog's SIGABRT.
    assert any("in _turn" in line for line in said), said
