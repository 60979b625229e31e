"""Commit-confirm, against a real origin, a real install and real gateways under a real
supervisord: an update run with ``--confirm-within`` rolls itself back at its deadline unless
``hermes update --confirm`` comes first, whatever dies meanwhile (its updater, every process
of the mesh and the timer itself, as long as any ``hermes`` command runs afterwards)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil

from services.updater import ReceiptStore
from services.updater.confirm import read_confirm
from services.updater.confirm_timer import running_timer, timer_alive
from shared import homes
from tests.e2e.test_update_canary import mesh_up, receipt_of, serves_on
from tests.support.installs import confirm_rollback, kill_updater_in_completion, kill_updater_paused_at
from tests.support.processes import read_state, wait_for

PROFILES = ("p1", "p2")
WITHIN = 20.0
SLACK = 5.0  # the rollback starts within this of the deadline
WAIT = 90.0


def rolled_back_on_time(install, update_id: str, deadline: float, old: str) -> dict:
    """Wait for the deadline's rollback of ``update_id``: it started within ``SLACK`` of the
    deadline and took the tree back to ``old``; its receipt."""
    receipt = wait_for(
        lambda: confirm_rollback(install.root, update_id), timeout=deadline - time.time() + WAIT, what="the rollback"
    )
    started = receipt["started_at"]
    from datetime import datetime

    at = datetime.fromisoformat(started).timestamp()
    assert deadline - 0.5 <= at <= deadline + SLACK, (at - deadline, receipt)
    assert install.head() == old and read_confirm(install.root) is None
    assert receipt["plan"]["rollback"]["of"] == update_id
    return receipt


def confirmed_update(install, within: float = WITHIN) -> tuple[str, float, str, str]:
    """A release, and ``hermes update --confirm-within``: its update id, deadline, old and new commit."""
    old = install.head()
    new = install.release("release 2")
    code, report = install.hermes_json("update", "--yes", "--confirm-within", f"{within:g}s")
    assert (code, report["outcome"]) == (0, "success"), report["failure"]
    record = read_confirm(install.root)
    assert record is not None and (record["before"], record["after"], record["update_id"]) == (
        old,
        new,
        report["update_id"],
    )
    assert report["confirm"]["deadline"] == record["deadline"]
    return report["update_id"], record["deadline"], old, new


def kill_confirm_timers(root: Path) -> None:
    for process in psutil.process_iter(["cmdline", "environ"]):
        try:
            argv = process.info["cmdline"] or []
            if "services.updater.confirm_timer" in argv and (process.info["environ"] or {}).get("HERMES_HOME") == str(
                root
            ):
                process.kill()
        except psutil.Error:
            pass


def test_an_unconfirmed_update_rolls_back_at_its_deadline(install):
    mesh_up(install, PROFILES)
    try:
        update_id, deadline, old, new = confirmed_update(install)
        assert running_timer(install.root) == "supervisord"  # supervisord's tick, not a waiter
        assert all(serves_on(install.root, p, new) for p in PROFILES)

        # Before the deadline: every command says so; a forward update is refused.
        listed = install.hermes("profile", "list")
        assert f"update {update_id} is not confirmed" in listed.stderr
        install.release("release 3")
        code, report = install.hermes_json("update", "--yes")
        assert (code, report["outcome"]) == (2, "refused") and "waits for its confirm" in report["refusal"]

        rolled_back_on_time(install, update_id, deadline, old)
        wait_for(lambda: all(serves_on(install.root, p, old) for p in PROFILES), timeout=WAIT, what="the old code")
        assert running_timer(install.root) == "supervisord"  # it stays for the next confirm
        code, report = install.hermes_json("update", "--confirm")
        assert (code, report["error"]["code"]) == (2, "confirm_nothing_pending")
    finally:
        kill_confirm_timers(install.root)


def test_a_confirmed_update_stays(install):
    mesh_up(install, ("p1",))
    try:
        update_id, deadline, old, new = confirmed_update(install, within=8)
        code, report = install.hermes_json("update", "--confirm")
        assert (code, report["confirmed"], report["code_sha"]) == (0, update_id, new)
        time.sleep(max(0.0, deadline - time.time()) + SLACK + 1)
        assert install.head() == new and confirm_rollback(install.root, update_id) is None
        assert serves_on(install.root, "p1", new)
    finally:
        kill_confirm_timers(install.root)


def test_too_late_a_confirm_is_refused_and_the_rollback_goes_on(install):
    try:
        update_id, deadline, old, _ = confirmed_update(install, within=6)  # no mesh: a waiter is the timer
        kill_confirm_timers(install.root)  # and none now: only a command can act
        time.sleep(max(0.0, deadline - time.time()) + 0.5)
        code, report = install.hermes_json("update", "--confirm")
        assert (code, report["error"]["code"]) == (2, "confirm_too_late"), report
        rollback = wait_for(lambda: confirm_rollback(install.root, update_id), timeout=WAIT, what="the rollback")
        assert rollback["outcome"] == "success" and install.head() == old
    finally:
        kill_confirm_timers(install.root)


def test_the_rollback_fires_though_the_updater_was_killed_after_the_commit_point(install):
    mesh_up(install, PROFILES)
    try:
        old = install.head()
        new = install.release("release 2")
        kill_updater_in_completion(install, "--confirm-within", f"{WITHIN:g}s")
        record = read_confirm(install.root)
        assert record is not None and (record["before"], record["after"]) == (old, new)
        assert running_timer(install.root) == "supervisord"
        rolled_back_on_time(install, record["update_id"], record["deadline"], old)
        wait_for(lambda: all(serves_on(install.root, p, old) for p in PROFILES), timeout=WAIT, what="the old code")
    finally:
        kill_confirm_timers(install.root)


def mesh_processes(install) -> list[psutil.Process]:
    """Every process of the install's mesh: anything running with its root as HERMES_HOME or
    one of its profiles' homes, or from its tree (supervisord, the gateway host, its fork
    server, the gateways, the confirm timer)."""
    homes_of = {str(install.root), *(str(homes.profile_home(p, install.root)) for p in PROFILES)}
    found = []
    for process in psutil.process_iter(["environ", "pid"]):
        try:
            if process.pid != os.getpid() and (process.info["environ"] or {}).get("HERMES_HOME") in homes_of:
                found.append(process)
        except psutil.Error:
            pass
    return found


def test_the_rollback_fires_though_every_process_of_the_mesh_died_once_any_command_runs(install):
    mesh_up(install, PROFILES)
    try:
        update_id, deadline, old, _ = confirmed_update(install, within=25)
        victims = mesh_processes(install)
        assert len(victims) >= 4  # supervisord, the host, its fork server, two gateways, the timer
        for process in victims:
            process.send_signal(signal.SIGKILL)
        psutil.wait_procs(victims, timeout=WAIT)
        assert not timer_alive(install.root) and not mesh_processes(install)
        assert read_state(homes.profile_home("p1", install.root)) is not None

        listed = install.hermes("profile", "list")  # any command: it starts a timer again
        assert listed.returncode == 0 and f"update {update_id} is not confirmed" in listed.stderr
        wait_for(lambda: running_timer(install.root) == "waiter", timeout=WAIT, what="the waiter the command started")
        rolled_back_on_time(install, update_id, deadline, old)
    finally:
        kill_confirm_timers(install.root)


def test_a_rollback_by_hand_before_the_deadline_ends_the_confirm(install):
    mesh_up(install, ("p1",))
    try:
        update_id, deadline, old, _ = confirmed_update(install, within=8)
        code, plan = install.hermes_json("update", "--plan", "--confirm-within", "1m")
        assert code == 0 and plan["owed"]["confirm"]["update_id"] == update_id, plan
        assert plan["confirm_within"] == 60.0
        code, report = install.hermes_json("update", "--yes", "--rollback")
        assert (code, report["outcome"], report["rollback"]["of"]) == (0, "success", update_id), report["failure"]
        assert install.head() == old and read_confirm(install.root) is None
        time.sleep(max(0.0, deadline - time.time()) + SLACK + 1)
        assert confirm_rollback(install.root, update_id) is None  # no second rollback at the deadline
        receipts, _ = ReceiptStore(install.root).all()
        assert len(receipts) == 2 and install.head() == old
    finally:
        kill_confirm_timers(install.root)


def test_a_confirm_armed_by_an_updater_killed_before_its_move_holds_nothing_back(install):
    mesh_up(install, ("p1",))
    try:
        old = install.head()
        new = install.release("release 2")
        kill_updater_paused_at(install, "updater:confirm-armed", "--confirm-within", "1m")
        stale = read_confirm(install.root)
        assert stale is not None and install.head() == old  # armed, and the tree never moved

        code, report = install.hermes_json("update", "--yes")  # not refused: that confirm owes nothing
        assert (code, report["outcome"]) == (0, "success"), report["failure"]
        assert install.head() == new and read_confirm(install.root) is None
        receipt = receipt_of(report)
        assert {"voided": stale["update_id"], "why": "the tree never left it"} in [
            s["detail"] for s in receipt["steps"] if s["name"] == "confirm"
        ]
    finally:
        kill_confirm_timers(install.root)


def test_an_unreadable_confirm_holds_forward_moves_and_a_rollback_or_a_confirm_settles_it(install):
    mesh_up(install, ("p1",))
    try:
        update_id, _, old, new = confirmed_update(install, within=3600)
        pending = install.root / "obligations" / "confirm-pending.json"
        pending.write_text('{"schema": 1, "update_id": "torn')  # a disk that lost the write's end

        listed = install.hermes("gateway", "list")  # every command names the way out, and runs
        assert listed.returncode == 0 and "--confirm` removes it" in listed.stderr and "--rollback" in listed.stderr
        code, plan = install.hermes_json("update", "--plan")
        assert code == 0 and plan["owed"]["confirm"]["state"] == "unreadable", plan

        newer = install.release("release 3")
        code, report = install.hermes_json("update", "--yes")
        assert (code, report["outcome"]) == (2, "refused") and "confirm-pending.json" in report["refusal"], report
        assert install.head() == new and pending.exists()

        code, report = install.hermes_json("update", "--yes", "--rollback")
        assert (code, report["outcome"], report["rollback"]["of"]) == (0, "success", update_id), report["failure"]
        assert install.head() == old and not pending.exists()
        steps = [s["detail"] for s in receipt_of(report)["steps"] if s["name"] == "confirm"]
        assert steps and steps[0]["voided"] is None and "confirm-pending.json" in steps[0]["why"], steps

        pending.write_text("[]")
        code, confirmed = install.hermes_json("update", "--confirm")
        assert (code, confirmed["confirmed"], confirmed["was"]) == (0, None, "unreadable"), confirmed
        assert confirmed["code_sha"] == old and not pending.exists()
        code, report = install.hermes_json("update", "--yes")
        assert (code, report["outcome"]) == (0, "success") and install.head() == newer, report["failure"]
    finally:
        kill_confirm_timers(install.root)
