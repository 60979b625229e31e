"""The canary's rules with no process started: what the plan says gates the move, its window,
and which leftovers of a killed updater's canary a run removes (only its own root's, only once
their updater is gone, never a planted link or a stranger's directory)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fleet.discovery import GatewayRecord
from services.updater.canary import MAX_WINDOW, OWNER, PREFIX, remove_abandoned, window_for
from services.updater.plan import canary_plan
from shared.identity import ProcessIdentity

OLD, NEW = "a" * 40, "b" * 40
MOVES = {"remote_sha": NEW, "up_to_date": False}


def gateway(profile: str) -> GatewayRecord:
    return GatewayRecord(profile, 100, None, "running", OLD, "0.1.0", 0, "unmanaged", "socket", Path("/h") / profile)


def test_the_plan_gates_a_move_by_git_with_the_first_live_gateways_profile():
    assert canary_plan(MOVES, None, [gateway("coder"), gateway("writer")], None, 10.0) == {
        "profile": "coder",
        "window": 10.0,
    }
    assert canary_plan(MOVES, None, [], None, 10.0) == {"profile": "default", "window": 10.0}


def test_nothing_to_gate_when_git_does_not_move_the_code():
    assert canary_plan(None, None, [], None, 10.0) is None  # git cannot read the target
    assert canary_plan({"remote_sha": None, "up_to_date": False}, None, [], None, 10.0) is None
    assert canary_plan({"remote_sha": OLD, "up_to_date": True}, None, [], None, 10.0) is None


def test_a_skipped_canary_says_why():
    assert canary_plan(MOVES, None, [], "--no-canary", 10.0) == {"skip": "--no-canary"}
    rollback = {"of": "u1", "target": OLD, "backup": None}
    assert "rollback" in canary_plan(MOVES, rollback, [], None, 10.0)["skip"]


def test_the_window_is_min_healthy_up_to_a_minute():
    assert window_for(0) == 0 and window_for(10) == 10
    assert window_for(3600) == MAX_WINDOW == 60


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
