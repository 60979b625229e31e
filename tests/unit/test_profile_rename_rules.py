"""The pure rules of a profile rename: its refusals, its journal, what an interrupted rename
does next, and how what is owed to a profile follows its new name."""

from __future__ import annotations

import subprocess

import pytest

from fleet.supervisors import launchd
from fleet.supervisors.supervisord.kind import rename_in
from fleet.supervisors.systemd import manager as systemd
from hermes_cli import profile_rename as rename
from nous.guest_handoff import rules as handoff_rules
from services.updater import obligations
from shared import homes
from tests.support.supervisors import SYSTEMD_RUNNING


@pytest.mark.parametrize(
    ("old", "new", "code", "field"),
    [
        ("Bad", "ok", "invalid_profile_name", "old_name"),
        ("ok", "no/slash", "invalid_profile_name", "new_name"),
        ("ok", "x\n", "invalid_profile_name", "new_name"),
        ("ok", "", "invalid_profile_name", "new_name"),
        ("default", "ok", "profile_reserved", "old_name"),
        ("ok", "default", "profile_reserved", "new_name"),
        ("same", "same", "profile_rename_same_name", "new_name"),
    ],
)
def test_a_refused_rename_names_the_field(old, new, code, field):
    with pytest.raises(Exception) as refused:
        rename.check_names(old, new)
    assert refused.value.code == code
    assert refused.value.detail["field"] == field


def test_two_valid_names_may_be_renamed():
    assert rename.check_names("coder", "writer") == ("coder", "writer")


def test_a_journal_reads_back_as_written():
    journal = rename.Journal("a", "b", rename.MOVE_UNITS, rename.Gateway("supervisord", "user", True))
    assert rename.parse_journal(journal.to_dict()) == journal
    assert rename.parse_journal(journal.at(rename.DRAIN).to_dict()).step == rename.DRAIN


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        {"schema": 2, "old": "a", "new": "b", "step": "drain", "gateway": None},
        {"schema": 1, "old": "a", "new": "a", "step": "drain", "gateway": None},
        {"schema": 1, "old": "default", "new": "b", "step": "drain", "gateway": None},
        {"schema": 1, "old": "a", "new": "../x", "step": "drain", "gateway": None},
        {"schema": 1, "old": "a", "new": "b", "step": "explode", "gateway": None},
        {"schema": 1, "old": "a", "new": "b", "step": "drain", "gateway": {"kind": "supervisord"}},
    ],
)
def test_a_journal_of_any_other_shape_is_corrupt(data):
    with pytest.raises(rename.RenameJournalCorrupt):
        rename.parse_journal(data)


def journal_at(step: str) -> rename.Journal:
    return rename.Journal("a", "b", step, None)


def test_a_rename_stopped_before_its_home_moved_is_undone():
    assert rename.resume(journal_at(rename.DRAIN), old_home=True, new_home=False) == (
        rename.BACK,
        (rename.RESTART_OLD,),
    )
    assert rename.resume(journal_at(rename.MOVE_HOME), old_home=True, new_home=False) == (
        rename.BACK,
        (rename.RESTART_OLD,),
    )


def test_a_rename_whose_home_moved_is_carried_through_from_where_it_stopped():
    direction, steps = rename.resume(journal_at(rename.MOVE_HOME), old_home=False, new_home=True)
    assert direction == rename.FORWARD and steps[0] == rename.MOVE_UNITS and steps[-1] == rename.FINISH
    direction, steps = rename.resume(journal_at(rename.START_GATEWAY), old_home=False, new_home=True)
    assert (direction, steps) == (rename.FORWARD, (rename.START_GATEWAY, rename.FINISH))


@pytest.mark.parametrize(("old_home", "new_home"), [(True, True), (False, False)])
def test_a_move_that_left_both_homes_or_neither_is_stuck_not_guessed(old_home, new_home):
    with pytest.raises(rename.RenameStuck):
        rename.resume(journal_at(rename.MOVE_HOME), old_home=old_home, new_home=new_home)


def test_only_steps_after_the_move_count_as_moved():
    assert [journal_at(s).moved for s in rename.STEPS] == [False, False, True, True, True, True]


def test_a_list_of_profiles_follows_a_rename():
    assert rename_in(["default", "a", "c"], "a", "b") == ["default", "b", "c"]
    assert rename_in(["default", "c"], "a", "b") == ["default", "c"]
    assert rename_in(["a", "b"], "a", "b") == ["b"]


def test_handoffs_owed_to_the_old_name_are_owed_to_the_new_one():
    records = {"k1": {"profile": "a", "state": "pending"}, "k2": {"profile": "c", "state": "pending"}}
    moved = handoff_rules.rename_profile(records, old="a", new="b")
    assert moved == {"k1": {"profile": "b", "state": "pending"}, "k2": {"profile": "c", "state": "pending"}}
    assert handoff_rules.rename_profile(records, old="x", new="y") is records  # nothing to write


def test_a_restart_owed_to_the_old_name_is_owed_to_the_new_one(tmp_path):
    part = obligations.owed_part("abc", obligations.STALE, "runs def", "u1")
    obligations.replace_fleet(tmp_path, {"a": part, "c": part})
    assert obligations.rename_gateway(tmp_path, "a", "b")
    assert obligations.read_fleet(tmp_path) == {"b": part, "c": part}
    assert not obligations.rename_gateway(tmp_path, "a", "b")  # taken again: nothing more


def test_the_journal_lives_where_no_profile_can(tmp_path):
    path = rename.journal_path(tmp_path)
    assert path.parent == homes.profiles_dir(tmp_path)
    assert not homes.is_named_profile(path.name) and not homes.is_named_profile(rename.LOCK_FILE)


# --- the supervisor units follow the new name ---------------------------------------------------


@pytest.mark.skipif(SYSTEMD_RUNNING, reason="a rename reloads the manager, and no test acts on a real one")
def test_a_systemd_unit_is_rewritten_under_the_new_name(user_dirs, tmp_path):
    old_home, new_home = tmp_path / "root/profiles/a", tmp_path / "root/profiles/b"
    systemd.install("a", old_home, scope="user")
    unit = systemd.rename("a", "b", new_home, scope="user")
    assert unit.name == "hermes-gateway-b.service" and unit.home == new_home
    assert not systemd.unit_path("a", scope="user").exists()
    assert systemd.find("b", new_home) is not None and systemd.find("a", old_home) is None
    assert systemd.rename("a", "b", new_home, scope="user").path == unit.path  # taken again: the same


def test_a_launchd_job_is_booted_out_and_rewritten_under_the_new_name(user_dirs, tmp_path):
    old_home, new_home = tmp_path / "root/profiles/a", tmp_path / "root/profiles/b"
    launchd.install("a", old_home, scope="user")
    ran: list[list[str]] = []

    def runner(argv: list[str]) -> subprocess.CompletedProcess[str]:
        ran.append(argv)
        return subprocess.CompletedProcess(argv, 0, "", "")

    unit = launchd.rename("a", "b", new_home, scope="user", runner=runner)
    assert ran[-1][:2] == ["launchctl", "bootout"] and ran[-1][2].endswith("/ai.hermes.gateway-a")
    assert unit.name == "ai.hermes.gateway-b" and launchd.find("b", new_home) is not None
    assert not launchd.unit_path("a", scope="user").exists()
