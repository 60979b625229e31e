"""The rule for a systemd unit an update meets: what runs is restarted, what is down stays down
(said to), what failed is reported with systemd's words and the gateway's own."""

from __future__ import annotations

import pytest

from services.updater.restart.systemd_state import (
    DOWN,
    FAILED,
    NOT_STARTED,
    RESTART,
    SAID_LIMIT,
    describe,
    failure,
    judge_unit,
)
from shared.redaction import MARKER


def shown(**properties: str) -> dict[str, str]:
    return {"LoadState": "loaded", "ActiveState": "active", "SubState": "running", **properties}


@pytest.mark.parametrize(
    "active, sub",
    [("active", "running"), ("activating", "start"), ("activating", "auto-restart"), ("reloading", "reload")],
)
def test_a_unit_that_runs_or_is_coming_up_is_restarted(active, sub):
    assert judge_unit(shown(ActiveState=active, SubState=sub)).verdict == RESTART


@pytest.mark.parametrize("file_state", ["enabled", "disabled", "static", ""])
def test_a_stopped_unit_stays_down_whether_enabled_or_not(file_state):
    state = judge_unit(shown(ActiveState="inactive", SubState="dead", Result="success", UnitFileState=file_state))
    assert state.verdict == DOWN
    assert state.why.startswith(NOT_STARTED)
    assert "ActiveState=inactive" in state.why


def test_a_unit_being_stopped_is_not_restarted():
    assert judge_unit(shown(ActiveState="deactivating", SubState="stop-sigterm")).verdict == DOWN


def test_a_failed_unit_is_reported_not_started():
    state = judge_unit(shown(ActiveState="failed", SubState="failed", Result="exit-code", ExecMainStatus="78"))
    assert (state.verdict, state.why) == (FAILED, "the unit failed; not started")


def test_a_masked_unit_stays_down_and_one_that_cannot_load_is_reported():
    assert judge_unit(shown(LoadState="masked", ActiveState="inactive")).verdict == DOWN
    for load in ("not-found", "bad-setting", "error", ""):
        state = judge_unit(shown(LoadState=load, ActiveState="inactive"))
        assert state.verdict == FAILED and "not loaded" in state.why


def test_nothing_shown_is_not_taken_for_a_running_unit():
    assert judge_unit({}).verdict == FAILED


def test_a_failure_is_told_in_systemds_words_and_the_gateways():
    account = failure(shown(ActiveState="failed", Result="exit-code", ExecMainStatus="78"), "gateway: run dir unsafe\n")
    assert account == {"result": "exit-code", "exit_status": 78, "gateway": "gateway: run dir unsafe"}
    assert describe(account) == "Result=exit-code, ExecMainStatus=78; the gateway said: gateway: run dir unsafe"


def test_a_failure_without_words_or_status_still_reads():
    account = failure({"Result": "", "ExecMainStatus": "junk"})
    assert account == {"result": None, "exit_status": None, "gateway": None}
    assert describe(account) == "Result=-, ExecMainStatus=-"


def test_the_gateways_words_are_redacted_and_cut_short():
    account = failure(shown(Result="exit-code"), "gateway: bad url https://user:hunter2@example.com/x " + "y" * 1000)
    assert "hunter2" not in account["gateway"] and MARKER in account["gateway"]
    assert len(account["gateway"]) == SAID_LIMIT
