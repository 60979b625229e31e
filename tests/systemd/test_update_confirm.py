"""Commit-confirm against a real systemd 252: where systemd is the init system, the confirm's
timer is a transient timer of its own (``systemd-run --on-active``), outside every unit of the
mesh, so the rollback fires at the deadline though every gateway was killed meanwhile."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from services.updater.confirm import read_confirm
from tests.support.installs import confirm_rollback
from tests.support.processes import wait_for

pytestmark = pytest.mark.systemd

WITHIN = 20.0
SLACK = 5.0
WAIT = 120.0


def test_systemd_rolls_an_unconfirmed_update_back_at_its_deadline_though_every_gateway_died(installs, sandbox):
    ours = installs("ours")
    ours.unit("default", "system")
    ours.unit("work", "user")
    old = ours.head()
    new = ours.release("release 2")

    code, report = ours.hermes_json("update", "--yes", "--confirm-within", f"{WITHIN:g}s")

    assert (code, report["outcome"], report["confirm"]["timer"]) == (0, "success", "systemd"), report
    record = read_confirm(ours.root)
    assert record is not None and (record["before"], record["after"]) == (old, new)
    timer = f"hermes-confirm-{record['update_id']}.timer"
    assert sandbox.systemctl("is-active", timer, check=False).stdout.strip() == "active"
    assert {g["code_sha"] for g in ours.answering().values()} == {new}

    for profile in ("default", "work"):  # every process of the mesh dies; systemd's timer does not
        sandbox.run(["kill", "-9", ours.show(profile, "MainPID")["MainPID"]])
    listed = ours.hermes("profile", "list")  # a command finds the timer armed and starts no waiter
    assert "is not confirmed" in listed.stderr
    assert not sandbox.run(["pgrep", "-f", "confirm_timer wait"], check=False).stdout.strip()

    rollback = wait_for(
        lambda: confirm_rollback(ours.root, record["update_id"]),
        timeout=record["deadline"] - time.time() + WAIT,
        what="the rollback",
    )
    started = datetime.fromisoformat(rollback["started_at"]).timestamp()
    assert record["deadline"] - 0.5 <= started <= record["deadline"] + SLACK, started - record["deadline"]
    assert rollback["outcome"] == "success" and ours.head() == old and read_confirm(ours.root) is None
    wait_for(lambda: {g["code_sha"] for g in ours.answering().values()} == {old}, timeout=WAIT, what="the old code")
    wait_for(
        lambda: sandbox.systemctl("is-active", timer, check=False).stdout.strip() != "active",
        timeout=WAIT,
        what="the timer to be gone",
    )
