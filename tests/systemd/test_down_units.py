"""Units that are down when ``hermes update`` runs, against a real systemd 252: an operator's
stop sticks, a failed unit is reported and never started, and a unit that fails says why.

Whether ``list-units`` still lists a stopped unit depends on the live manager (it unloads one
nothing references), so these use units both enabled and not."""

from __future__ import annotations

import pytest

from fleet.supervisors.systemd import unit_name
from tests.support.systemd_fleet import BROKEN_TCP_SETTING

pytestmark = pytest.mark.systemd

STATE = ("ActiveState", "Result", "NRestarts", "ExecMainPID", "ExecMainStatus")


def by_profile(receipt) -> dict:
    return {outcome["profile"]: outcome for outcome in receipt["restart"]}


def test_an_operators_stop_sticks_through_an_update(installs, sandbox):
    ours = installs("ours")
    ours.unit("default", "system", enable=True)
    ours.unit("work", "user", enable=True)
    ours.unit("bench", "user")  # not enabled: once stopped, the manager may unload it
    for profile in ("default", "bench"):
        stopped = ours.hermes("gateway", "stop", profile=profile)
        assert stopped.returncode == 0, stopped.stderr
    before = {profile: ours.show(profile, *STATE) for profile in ("default", "bench")}
    new = ours.release("release 2")

    code, report, receipt = ours.update()

    assert (code, report["outcome"]) == (0, "success"), report
    outcomes = by_profile(receipt)
    for profile, old in before.items():
        outcome = outcomes[profile]
        assert (outcome["method"], outcome["ok"], outcome["new_pid"]) == ("skip", True, None), outcome
        assert outcome["note"].startswith("down; not started"), outcome
        assert ours.show(profile, *STATE) == old  # not started: the same stopped unit, no new process
    assert set(outcomes) == {"default", "work", "bench"}  # bench too, though the manager may have unloaded it
    assert (outcomes["work"]["method"], outcomes["work"]["ok"]) == ("drain", True)
    assert set(ours.answering()) == {"work"}
    assert ours.answering()["work"]["code_sha"] == new
    assert report["restart_failed"] == []


def test_a_failed_unit_is_reported_by_every_update_and_never_started(installs, sandbox):
    ours = installs("ours")
    ours.unit("default", "system")
    ours.unit("work", "user", enable=True)
    ours.break_next_start("work")  # its next gateway exits 78
    ours.release("release 2")
    code, _, receipt = ours.update()
    assert code == 0 and not by_profile(receipt)["work"]["ok"]
    failed = ours.show("work", *STATE)
    assert (failed["ActiveState"], failed["ExecMainStatus"]) == ("failed", "78")

    for release in ("release 3", "release 4"):
        new = ours.release(release)
        code, report, receipt = ours.update()

        assert (code, report["outcome"]) == (0, "success"), report
        outcome = by_profile(receipt)["work"]
        assert (outcome["method"], outcome["ok"], outcome["new_pid"]) == ("skip", False, None), outcome
        assert outcome["reason"].startswith("the unit failed; not started"), outcome
        assert outcome["failure"]["result"] == "exit-code" and outcome["failure"]["exit_status"] == 78
        assert ours.show("work", *STATE) == failed  # never started again: the same failed invocation
        assert [(f["profile"], f["unit"]) for f in report["restart_failed"]] == [("work", unit_name("work"))]
        assert ours.answering()["default"]["code_sha"] == new


def test_a_unit_that_fails_to_start_says_why(installs, sandbox):
    ours = installs("ours")
    ours.unit("default", "user")
    ours.unit("bench", "system")
    ours.break_next_start("bench")
    ours.release("release 2")

    code, report, receipt = ours.update()

    assert code == 0, report
    outcome = by_profile(receipt)["bench"]
    assert outcome["ok"] is False
    assert "Result=exit-code, ExecMainStatus=78; the gateway said: gateway:" in outcome["reason"], outcome
    account = outcome["failure"]
    assert (account["result"], account["exit_status"]) == ("exit-code", 78), outcome
    # The gateway's own words, from the journal: its TCP setting is broken.
    assert BROKEN_TCP_SETTING in account["gateway"] and account["gateway"].startswith("gateway:"), account
    assert account["gateway"] in outcome["reason"]
    (followup,) = [f["reason"] for f in report["followups"] if f["reason"].startswith("gateway bench ")]
    assert "ExecMainStatus=78" in followup and BROKEN_TCP_SETTING in followup
    # The next update names it too, in its text, though no gateway of bench ran before it.
    ours.release("release 3")
    printed = ours.hermes("update", "--yes")
    assert printed.returncode == 0, printed.stderr
    said = f"⚠ restart: gateway bench ({unit_name('bench')}): the unit failed; not started: "
    assert f"{said}Result=exit-code, ExecMainStatus=78; the gateway said: gateway:" in printed.stdout
