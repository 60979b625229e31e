"""The canary's and the gates' rules with no process started: what the plan says gates the
move, how the fleet is cut into waves and when a wave passes its gate, and which leftovers of
a killed updater's canary a run removes (only its own root's, only once their updater is gone,
never a planted link or a stranger's directory)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fleet.discovery import GatewayRecord
from fleet.health import HEALTHY, UNHEALTHY, UNKNOWN, Health
from services.updater.canary import OWNER, PREFIX, remove_abandoned
from services.updater.held import FILE as HELD_FILE
from services.updater.held import held_back, hold, holds, read_held, unhold
from services.updater.plan import canary_plan
from services.updater.waves import judge_wave, waves
from shared.identity import ProcessIdentity

OLD, NEW = "a" * 40, "b" * 40
MOVES = {"remote_sha": NEW, "up_to_date": False}


def gateway(profile: str) -> GatewayRecord:
    return GatewayRecord(profile, 100, None, "running", OLD, "0.1.0", 0, "unmanaged", "socket", Path("/h") / profile)


def test_the_plan_gates_a_move_by_git_with_the_first_live_gateways_profile():
    assert canary_plan(MOVES, None, [gateway("coder"), gateway("writer")], None) == {"profile": "coder"}
    assert canary_plan(MOVES, None, [], None) == {"profile": "default"}


def test_nothing_to_gate_when_git_does_not_move_the_code():
    assert canary_plan(None, None, [], None) is None  # git cannot read the target
    assert canary_plan({"remote_sha": None, "up_to_date": False}, None, [], None) is None
    assert canary_plan({"remote_sha": OLD, "up_to_date": True}, None, [], None) is None


def test_a_skipped_canary_says_why():
    assert canary_plan(MOVES, None, [], "--no-canary") == {"skip": "--no-canary"}
    rollback = {"of": "u1", "target": OLD, "backup": None}
    assert "rollback" in canary_plan(MOVES, rollback, [], None)["skip"]


def test_the_fleet_is_cut_into_waves_in_order():
    assert waves(["a", "b", "c", "d", "e"], 2) == [["a", "b"], ["c", "d"], ["e"]]
    assert waves(["a", "b", "c"], 0) == [["a", "b", "c"]]  # 0: one wave of them all
    assert waves(["a", "b"], 5) == [["a", "b"]]
    assert waves([], 3) == []


OK = {"ok": True}


def test_a_wave_passes_its_gate_once_every_gateway_of_it_is_healthy():
    healthy = Health(HEALTHY)
    young = Health(UNKNOWN, "up 0 s; healthy after 10 s without a restart")
    verdict = judge_wave(1, ["a", "b"], {"a": OK, "b": OK}, {"a": healthy, "b": young}, timed_out=False)
    assert (verdict.passed, verdict.failed) == (False, None)  # waits
    assert verdict.waiting_on == "b: up 0 s; healthy after 10 s without a restart"
    verdict = judge_wave(1, ["a", "b"], {"a": OK, "b": OK}, {"a": healthy, "b": healthy}, timed_out=False)
    assert verdict.passed


def test_a_wave_fails_at_once_on_a_failed_restart_or_an_unhealthy_gateway():
    healthy, sick = Health(HEALTHY), Health(UNHEALTHY, "its probe turn failed (internal_error)")
    failed_restart = {"ok": False, "reason": "no answer within 30 s"}
    verdict = judge_wave(3, ["e", "f"], {"e": OK, "f": OK}, {"e": healthy, "f": sick}, timed_out=False)
    assert verdict.failed is not None and not verdict.passed
    assert verdict.failed.detail == {"wave": 3, "profile": "f", "check": "turn", "why": sick.why}
    verdict = judge_wave(2, ["c"], {"c": failed_restart}, {"c": healthy}, timed_out=False)
    assert verdict.failed is not None and verdict.failed.detail["check"] == "restart"
    assert verdict.failed.detail["why"] == "no answer within 30 s"


def test_a_wave_still_waiting_at_its_deadline_fails_naming_what_it_waited_for():
    verdict = judge_wave(1, ["a", "b"], {"a": OK, "b": OK}, {"a": Health(HEALTHY)}, timed_out=True)
    assert verdict.failed is not None
    assert verdict.failed.detail == {"wave": 1, "profile": "b", "check": "deadline", "why": "no gateway of it answers"}
    assert judge_wave(1, ["a"], {"a": OK}, {"a": Health(HEALTHY)}, timed_out=True).passed


def _canary(base: Path, name: str, record: object) -> Path:
    work = base / (PREFIX + name)
    (work / "tree").mkdir(parents=True)
    (work / OWNER).write_text(json.dumps(record))
    return work


def test_only_this_roots_canaries_of_dead_updaters_are_removed(tmp_path):
    base, root = tmp_path / "tmp", tmp_path / "home"
    dead = {"pid": 4242, "start_time": 1}
    live = {"pid": 4343, "start_time": 2}
    abandoned = _canary(base, "abandoned", {"updater": dead, "root": str(root)})
    running = _canary(base, "running", {"updater": live, "root": str(root)})
    other_install = _canary(base, "other", {"updater": dead, "root": str(tmp_path / "elsewhere")})
    no_record = base / (PREFIX + "making")
    no_record.mkdir()
    garbled = _canary(base, "garbled", {"updater": {"pid": True}, "root": str(root)})
    not_ours = base / "unrelated"
    not_ours.mkdir()
    (not_ours / OWNER).write_text(json.dumps({"updater": dead, "root": str(root)}))
    planted = base / (PREFIX + "link")
    os.symlink(abandoned, planted)

    def alive(updater: ProcessIdentity) -> bool:
        return updater == ProcessIdentity(**live)

    removed = remove_abandoned(root, base, alive=alive)

    assert removed == [str(abandoned)]
    assert not abandoned.exists()
    for kept in (running, other_install, no_record, garbled, not_ours):
        assert kept.exists(), kept
    assert planted.is_symlink()  # a link is never followed, nor removed
    assert remove_abandoned(root, base, alive=alive) == []


def test_a_reverted_commit_is_held_back_until_origin_moves_on(tmp_path):
    assert read_held(tmp_path) is None
    hold(tmp_path, sha=NEW, update_id="u1", why="wave 2 failed its gate")
    record = read_held(tmp_path)
    assert record is not None and (record["sha"], record["update_id"]) == (NEW, "u1")
    assert holds(record, MOVES)  # origin still offers the reverted commit
    assert not holds(record, {"remote_sha": "c" * 40, "up_to_date": False})  # origin moved on
    assert not holds(record, {"remote_sha": NEW, "up_to_date": True}) and not holds(record, None)
    assert "rolled back by update u1 (wave 2 failed its gate)" in held_back(record)
    unhold(tmp_path)
    assert read_held(tmp_path) is None
    unhold(tmp_path)  # nothing held: nothing to do


def test_a_hold_that_cannot_be_read_holds_nothing_back(tmp_path):
    for text in ("{not json", '{"sha": 7, "update_id": "u1", "why": "x"}', "[]"):
        (tmp_path / HELD_FILE).write_text(text)
        assert read_held(tmp_path) is None, text
