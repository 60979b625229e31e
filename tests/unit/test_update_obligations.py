"""What a committed update owes (``services.updater.obligations``): the record and its warning line."""

from __future__ import annotations

import json

import pytest

from hermes_cli import main as cli
from services.updater import obligations
from shared.files import StateFileCorrupt
from tests.support.updater import NEW, owe


def test_nothing_owed_means_no_file_and_no_warning(tmp_path):
    assert obligations.read_fleet(tmp_path) == {}
    assert obligations.read_completion(tmp_path) is None
    assert obligations.restart_warning({"HERMES_HOME": str(tmp_path)}) is None
    owe(tmp_path, coder=obligations.STALE)
    owe(tmp_path)  # a verify that found nothing wanting
    assert not obligations.fleet_path(tmp_path).exists()


def test_the_warning_names_every_owed_gateway_in_one_line(tmp_path):
    env = {"HERMES_HOME": str(tmp_path / "profiles" / "coder")}  # run for a profile: the root's file counts
    owe(tmp_path, coder=obligations.STALE, writer=obligations.NOT_RESTARTED)
    assert obligations.restart_warning(env) == "⚠ 2 gateways still run old code (coder, writer): run `hermes update`"
    owe(tmp_path, coder=obligations.STALE)
    assert obligations.restart_warning(env) == "⚠ 1 gateway still runs old code (coder): run `hermes update`"
    owe(tmp_path, coder=obligations.STALE, writer=obligations.DOWN)
    line = obligations.restart_warning(env)
    assert line.startswith("⚠ 2 gateways are not on the new code (coder, writer: down): run `hermes update`")
    assert "\n" not in line


def test_a_corrupt_obligation_is_reported_never_taken_for_nothing_owed(tmp_path):
    path = obligations.fleet_path(tmp_path)
    path.parent.mkdir()
    path.write_text('{"schema": 1, "gateways": {"coder": {"state": "sleepy"}}}')
    with pytest.raises(StateFileCorrupt):
        obligations.read_fleet(tmp_path)
    path.write_text('{"schema": 1, "gate')  # torn
    line = obligations.restart_warning({"HERMES_HOME": str(tmp_path)})
    assert line.startswith("⚠ state file") and "corrupt" in line and str(path) in line
    obligations.completion_path(tmp_path).write_text("[]")
    with pytest.raises(StateFileCorrupt):
        obligations.read_completion(tmp_path)


def test_a_gateway_part_clears_only_on_the_code_expected_of_it(tmp_path):
    owe(tmp_path, coder=obligations.STALE, writer=obligations.DOWN)
    assert not obligations.clear_gateway(tmp_path, "coder", "a" * 40)  # restarted, but onto other code
    assert not obligations.clear_gateway(tmp_path, "coder", None)  # did not answer
    assert not obligations.clear_gateway(tmp_path, "default", NEW)  # never owed
    assert set(obligations.read_fleet(tmp_path)) == {"coder", "writer"}
    assert obligations.clear_gateway(tmp_path, "coder", NEW)
    assert set(obligations.read_fleet(tmp_path)) == {"writer"}
    assert obligations.clear_gateway(tmp_path, "writer", NEW)
    assert not obligations.fleet_path(tmp_path).exists()  # nothing owed: no file, no warning


def test_a_pending_completion_round_trips_and_clears(tmp_path):
    obligations.arm_completion(tmp_path, update_id="u1", before="a" * 40, after=NEW)
    pending = obligations.read_completion(tmp_path)
    assert (pending["update_id"], pending["before"], pending["after"], pending["attempt"]) == (
        "u1",
        "a" * 40,
        NEW,
        None,
    )
    attempt = {"update_id": "u2", "request": "/r/u2.request.json", "result": "/r/u2.result.json"}
    obligations.arm_completion(tmp_path, update_id="u1", before="a" * 40, after=NEW, attempt=attempt)
    assert obligations.read_completion(tmp_path)["attempt"] == attempt
    obligations.clear_completion(tmp_path)
    assert obligations.read_completion(tmp_path) is None
    obligations.clear_completion(tmp_path)  # clearing what is not owed is fine


def test_an_unknown_state_is_refused():
    with pytest.raises(ValueError):
        obligations.owed_part(NEW, "bored", "why", "u1")


def test_commands_that_report_owed_work_themselves_do_not_warn(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    owe(tmp_path, coder=obligations.STALE)
    ran: list[str] = []
    monkeypatch.setattr(cli, "_load", lambda target: lambda args: ran.append(target) or 0)
    for argv in (["update", "--yes"], ["update", "--check"], ["gateway", "run"], ["gateway"]):
        assert cli.main(argv) == 0
        assert "⚠" not in capsys.readouterr().err, argv
    assert cli.main(["gateway", "status"]) == 0
    assert capsys.readouterr().err.count("⚠") == 1
    assert ran[-1] == "hermes_cli.commands.gateway_status:cmd_status"


SHA, BEFORE = "c" * 40, "d" * 40


def test_a_pending_stash_round_trips_and_clears(tmp_path):
    assert obligations.read_stash(tmp_path) is None
    obligations.arm_stash(tmp_path, update_id="u1", sha=SHA, before=BEFORE, paths=["README.md"])
    owed = obligations.read_stash(tmp_path)
    assert (owed["update_id"], owed["sha"], owed["before"], owed["paths"]) == ("u1", SHA, BEFORE, ["README.md"])
    assert obligations.restart_warning({"HERMES_HOME": str(tmp_path)}) is None  # not a fleet debt
    obligations.clear_stash(tmp_path)
    assert obligations.read_stash(tmp_path) is None and not obligations.stash_path(tmp_path).exists()


@pytest.mark.parametrize("sha", ["stash@{0}", "C" * 40, "c" * 39, "-" + "c" * 39, None])
def test_a_stash_is_recorded_only_by_a_full_commit_id(tmp_path, sha):
    with pytest.raises(ValueError):
        obligations.arm_stash(tmp_path, update_id="u1", sha=sha, before=BEFORE, paths=[])
    path = obligations.stash_path(tmp_path)
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"schema": 1, "update_id": "u1", "sha": sha, "before": BEFORE, "paths": []}))
    with pytest.raises(StateFileCorrupt):
        obligations.read_stash(tmp_path)


def test_a_stash_record_of_another_shape_is_corrupt(tmp_path):
    path = obligations.stash_path(tmp_path)
    path.parent.mkdir()
    paths_not_a_list = {"schema": 1, "update_id": "u1", "sha": SHA, "before": BEFORE, "paths": "README.md"}
    for text in (json.dumps(paths_not_a_list), '{"schema": 1, "sha": "' + SHA, "[]"):
        path.write_text(text)
        with pytest.raises(StateFileCorrupt):
            obligations.read_stash(tmp_path)


def test_a_failed_multiplex_restart_is_owed_and_warned_by_profile_never_by_pid(tmp_path):
    from services.updater import ledger
    from services.updater.verify import MatrixRow

    pid = 4242  # one process serves a, b and c
    matrix = [
        MatrixRow(p, "supervisord", pid, "running", running="o" * 40, expected=NEW, verdict="stale", source="socket")
        for p in ("a", "b", "c")
    ]
    why = "drain was refused: busy"
    restarts = [{"profile": "a", "ok": False, "reason": why}] + [
        {"profile": p, "ok": False, "reason": f"served by the process of a: {why}"} for p in ("b", "c")
    ]
    debt = ledger.owed_after_verify(matrix, ["a", "b", "c"], "u1", ledger.failed_restarts({"restart": restarts}))
    assert set(debt.parts) == {"a", "b", "c"}
    assert "served by the process of a" in str(debt.followup) and str(pid) not in str(debt.followup)
    obligations.replace_fleet(tmp_path, debt.parts)
    line = obligations.restart_warning({"HERMES_HOME": str(tmp_path)})
    assert line == "⚠ 3 gateways still run old code (a, b, c): run `hermes update`"


def test_what_is_owed_is_counted_by_kind_and_an_unreadable_file_counts_as_owed(tmp_path):
    nothing = dict.fromkeys(obligations.OWED_KINDS, 0)
    assert obligations.owed_counts(tmp_path) == nothing
    owe(tmp_path, coder=obligations.STALE, writer=obligations.DOWN)
    obligations.confirm_path(tmp_path).write_text("{}")  # its shape is the confirm's to judge
    assert obligations.owed_counts(tmp_path) == {**nothing, "fleet_restart": 2, "confirm": 1}
    obligations.completion_path(tmp_path).write_text('{"schema": 1, "upd')  # torn
    assert obligations.owed_counts(tmp_path)["completion"] == 1
