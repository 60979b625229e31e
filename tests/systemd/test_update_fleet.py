"""``hermes update`` against a real systemd 252: units written by ``hermes gateway install
--supervisor systemd`` in both scopes, a real origin, the fleet restarted onto the new commit.

Every command of the install runs inside the sandbox's namespaces, so ``systemctl`` talks to
its private managers and the pids it reports are the ones the gateways answer with."""

from __future__ import annotations

import pytest

from fleet.supervisors.systemd import unit_name
from services.updater.restart.systemd_budget import restart_budget

pytestmark = pytest.mark.systemd

PLANNED = ("MainPID", "NRestarts", "ActiveState", "Result")


def pid_alive(sandbox, pid: str | int) -> bool:
    return sandbox.run(["kill", "-0", str(pid)], check=False).returncode == 0


def by_profile(receipt) -> dict:
    return {outcome["profile"]: outcome for outcome in receipt["restart"]}


def test_update_drains_every_unit_onto_the_new_commit_and_leaves_a_sibling_alone(installs, sandbox):
    ours, sibling = installs("ours"), installs("sibling")
    ours.unit("default", "system")
    ours.unit("work", "user")
    ours.unit("bench", "system")
    sibling.unit("default", "user")  # hermes-gateway.service too, in the other manager, on another home
    before = {profile: ours.show(profile, *PLANNED) for profile in ("default", "work", "bench")}
    sibling_before = sibling.show("default", "MainPID")["MainPID"]
    sibling_code = sibling.answering()["default"]["code_sha"]
    new = ours.release("release 2")
    cursor = sandbox.cursor()

    code, report, receipt = ours.update()

    assert (code, report["outcome"]) == (0, "success"), report
    outcomes = by_profile(receipt)
    assert set(outcomes) == {"default", "work", "bench"}
    answering = ours.answering()
    for profile, old in before.items():
        outcome, now = outcomes[profile], ours.show(profile, *PLANNED)
        assert (outcome["method"], outcome["fallback"], outcome["ok"]) == ("drain", None, True), outcome
        assert outcome["unit"] == unit_name(profile) and outcome["scope"] == ours.scopes[profile]
        assert outcome["old_pid"] == int(old["MainPID"]) != outcome["new_pid"] == int(now["MainPID"])
        assert not pid_alive(sandbox, old["MainPID"])
        assert int(now["NRestarts"]) == int(old["NRestarts"]) + 1  # systemd started it after the drain's exit 75
        assert (now["ActiveState"], now["Result"]) == ("active", "success")
        assert answering[profile]["code_sha"] == new
        assert (answering[profile]["pid"], answering[profile]["supervisor"]) == (int(now["MainPID"]), "systemd")
        journal = ours.journal(profile, after=cursor)
        assert not [line for line in journal if "Failed with result" in line]
        if ours.scopes[profile] == "system":  # a user manager logs a unit's success at debug level only
            assert f"{unit_name(profile)}: Deactivated successfully." in journal
    assert sibling.show("default", "MainPID")["MainPID"] == sibling_before
    assert sibling.answering()["default"]["code_sha"] == sibling_code != new


def test_a_unit_whose_gateway_exits_78_fails_alone(installs, sandbox):
    ours = installs("ours")
    for profile, scope in (("default", "user"), ("work", "system"), ("bench", "user")):
        ours.unit(profile, scope)
    # bench's next gateway finds its TCP setting broken and exits 78, which its unit does not restart.
    ours.break_next_start("bench")
    new = ours.release("release 2")

    code, report, receipt = ours.update()

    assert (code, report["outcome"]) == (0, "success"), report  # committed: a gateway's failure is a follow-up
    outcomes = by_profile(receipt)
    broken = outcomes["bench"]
    assert (broken["ok"], broken["new_pid"]) == (False, None)
    assert broken["reason"]
    shown = ours.show("bench", "ActiveState", "Result", "ExecMainStatus")
    assert shown == {"ActiveState": "failed", "Result": "exit-code", "ExecMainStatus": "78"}
    assert [step["ok"] for step in receipt["steps"] if step["name"] == "restart"] in ([], [False])
    answering = ours.answering()
    for profile in ("default", "work"):
        assert (outcomes[profile]["ok"], outcomes[profile]["method"]) == (True, "drain")
        assert answering[profile]["code_sha"] == new
    assert [f["reason"] for f in report["followups"] if "bench" in f["reason"]]


def test_the_blunt_restart_completes_within_the_units_budget(installs, sandbox):
    ours = installs("ours")
    ours.unit("work", "user", start=False)
    # One start an hour: systemd's own start after the drain hits the start limit and the unit
    # fails, so only the updater's reset and restart can bring the new code up.
    drop_in = sandbox.config / "systemd" / "user" / f"{unit_name('work')}.d"
    drop_in.mkdir(parents=True)
    (drop_in / "limit.conf").write_text("[Unit]\nStartLimitIntervalSec=1h\nStartLimitBurst=1\n")
    sandbox.systemctl("daemon-reload", user=True)
    ours.start("work")
    limits = ours.show("work", "TimeoutStopUSec", "TimeoutStartUSec", "MainPID")
    new = ours.release("release 2")

    code, report, receipt = ours.update()

    assert code == 0, report
    outcome = by_profile(receipt)["work"]
    assert (outcome["method"], outcome["fallback"], outcome["ok"]) == ("drain", "blunt", True), outcome
    assert "the unit is failed" in outcome["note"]
    # The gateway had drained and exited: only the start was waited for, with the unit's own limit.
    assert outcome["budget"] == restart_budget(limits["TimeoutStopUSec"], limits["TimeoutStartUSec"], start_only=True)
    now = ours.show("work", "MainPID", "ActiveState")
    assert outcome["new_pid"] == int(now["MainPID"]) != int(limits["MainPID"])
    assert now["ActiveState"] == "active"
    assert ours.answering()["work"]["code_sha"] == new
    (drop_in / "limit.conf").unlink()
    drop_in.rmdir()


def test_a_gateway_whose_socket_is_gone_is_drained_by_sigusr1(installs, sandbox):
    ours = installs("ours")
    ours.unit("default", "system")
    old = ours.show("default", "MainPID", "NRestarts")
    (ours.root / "run" / "gateway.ctl").unlink()
    new = ours.release("release 2")

    code, report, receipt = ours.update()

    assert code == 0, report
    outcome = by_profile(receipt)["default"]
    assert (outcome["method"], outcome["fallback"], outcome["ok"]) == ("signal", None, True), outcome
    now = ours.show("default", "MainPID", "NRestarts")
    assert outcome["old_pid"] == int(old["MainPID"]) != int(now["MainPID"])
    assert int(now["NRestarts"]) == int(old["NRestarts"]) + 1
    assert ours.answering()["default"]["code_sha"] == new
