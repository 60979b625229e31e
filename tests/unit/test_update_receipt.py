"""The update receipt (pure transitions, the store, what it hides) and the update lock within
this process."""

from __future__ import annotations

import json
import os
import threading
from datetime import datetime, timedelta, timezone

import pytest

from services.updater import lock as lock_module
from services.updater.lock import UpdateInProgress, UpdateLock, holder, stale_holder
from services.updater.receipt import FAILED, SCHEMA, SUCCESS, Receipt, ReceiptError, exit_code_for
from services.updater.receipt_store import KEEP, ReceiptStore
from services.updater.update_id import InvalidUpdateId, new_update_id
from shared.files import StateFileCorrupt, write_json_atomic
from shared.identity import ProcessIdentity, current_identity
from shared.locks import FileLock
from shared.redaction import MARKER as REDACTED
from tests.support.updater import BEFORE, T0, begin

JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
ANON = "anon_4f9a1c2e8b7d6a5f3e2d1c0b"


# --- transitions ----------------------------------------------------------------------------


def test_valid_sequence_round_trips():
    r = begin()
    d = r.to_dict()
    assert (d["schema"], d["outcome"], d["finished_at"], d["exit_code"]) == (SCHEMA, "running", None, None)
    assert (d["pid"], d["start_time"]) == (os.getpid(), current_identity().start_time)
    assert d["started_at"] == "2026-08-01T12:30:45.000+00:00"
    r.set("plan", {"install": {"kind": "git"}})
    r.step("plan", True)
    r.skip("snapshot", "--no-backup")
    r.set("snapshots", [])
    r.step("apply", True, {"moved": True}, at=T0 + timedelta(seconds=3))
    r.set("completion", {"pid": 4242, "start_time": 7, "code_sha": "b" * 40})
    r.set("restart", [{"profile": "default", "ok": True}])
    r.set("fleet", [{"profile": "default", "verdict": "stale"}])
    r.followup("fleet_restart", "gateway default is stale")
    r.followup("fleet_restart", "gateway default still stale")  # one debt per step
    r.followup("dependencies", "pip failed")
    r.set("after", {"code_sha": "b" * 40, "code_version": "0.2.0"})
    r.finish("success", 0, at=T0 + timedelta(seconds=9))

    d = r.to_dict()
    assert d["outcome"] == "success" and d["exit_code"] == 0 and r.finished
    assert d["finished_at"] == "2026-08-01T12:30:54.000+00:00"
    assert [s["name"] for s in d["steps"]] == ["plan", "apply"]
    at = "2026-08-01T12:30:48.000+00:00"
    assert d["steps"][1] == {"name": "apply", "ok": True, "detail": {"moved": True}, "at": at}
    assert d["skips"][0]["reason"] == "--no-backup"
    assert d["followups"] == [
        {"step": "fleet_restart", "reason": "gateway default still stale"},
        {"step": "dependencies", "reason": "pip failed"},
    ]
    back = Receipt.from_dict(json.loads(json.dumps(d)))
    assert back.to_dict() == d


def test_partial_needs_a_user_action():
    r = begin()
    with pytest.raises(ReceiptError, match="user_action"):
        r.finish("partial", 1)
    r.user_action("run `git stash pop` in the install and resolve the conflict")
    r.finish("partial", 1)
    assert Receipt.from_dict(r.to_dict()).outcome == "partial"


def test_a_second_user_action_is_added_after_the_first():
    r = begin()
    r.user_action("apply stash A")
    r.user_action("apply stash B")
    assert r["user_action"] == "apply stash A\napply stash B"
    with pytest.raises(ReceiptError):
        r.user_action(" ")
    assert r["user_action"] == "apply stash A\napply stash B"


def test_the_receipt_keeps_private_copies():
    r = begin()
    plan = {"profiles": ["default"]}
    r.set("plan", plan)
    plan["profiles"].append("coder")
    r.to_dict()["plan"]["profiles"].append("x")
    assert r["plan"] == {"profiles": ["default"]}


@pytest.mark.parametrize(
    "misuse",
    [
        lambda r: r.finish("running", 0),
        lambda r: r.finish("exploded", 1),
        lambda r: r.finish("success", 1),
        lambda r: r.finish("interrupted", 1),
        lambda r: r.finish("success", True),  # a bool is not an exit code
        lambda r: r.set("secrets", {}),
        lambda r: r.set("plan", ["not", "an", "object"]),
        lambda r: r.set("completion", {"code_sha": "b"}),
        lambda r: r.set("fleet", {"bad": object()}),
        lambda r: r.set("fleet", {"nan": float("nan")}),
        lambda r: r.step("", True),
        lambda r: r.step("plan", 1),
        lambda r: r.skip("snapshot", ""),
        lambda r: r.followup("fleet", " "),
        lambda r: r.user_action(""),
    ],
)
def test_misuse_raises(misuse):
    r = begin()
    with pytest.raises(ReceiptError):
        misuse(r)
    assert r.outcome == "running"


def test_begin_validates():
    with pytest.raises(ReceiptError):
        Receipt.begin("../etc", ["hermes"], current_identity(), BEFORE)
    with pytest.raises(ReceiptError):
        Receipt.begin("u1", "hermes update", current_identity(), BEFORE)
    with pytest.raises(ReceiptError):
        Receipt.begin("u1", ["hermes"], current_identity(), BEFORE, at=datetime(2026, 1, 1))  # naive
    assert len(new_update_id()) == 12 and Receipt.begin(new_update_id(), [], current_identity(), {})


@pytest.mark.parametrize(
    "after_finish",
    [
        lambda r: r.finish("success", 0),
        lambda r: r.step("verify", True),
        lambda r: r.skip("verify", "nothing to verify"),
        lambda r: r.set("after", {}),
        lambda r: r.followup("fleet", "stale"),
        lambda r: r.user_action("do something"),
        lambda r: r.interrupt(),
    ],
)
def test_a_finished_receipt_is_frozen(after_finish):
    r = begin()
    r.finish("failed", 1)
    with pytest.raises(ReceiptError, match="already finished"):
        after_finish(r)
    assert r.outcome == "failed"


def _valid() -> dict:
    r = begin()
    r.step("plan", True)
    r.finish("refused", 2)
    return r.to_dict()


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda d: d.update(schema=2),
        lambda d: d.update(schema=True),
        lambda d: d.pop("steps"),
        lambda d: d.update(surprise=1),
        lambda d: d.update(outcome="exploded"),
        lambda d: d.update(exit_code=0),
        lambda d: d.update(exit_code=None),
        lambda d: d.update(finished_at=None),
        lambda d: d.update(outcome="running"),  # running, yet finished_at and exit_code are set
        lambda d: d.update(started_at="yesterday"),
        lambda d: d.update(started_at="2026-08-01T12:00:00"),  # no timezone
        lambda d: d.update(pid=-3),
        lambda d: d.update(start_time="12"),
        lambda d: d.update(argv="hermes update"),
        lambda d: d.update(update_id="a/b"),
        lambda d: d.update(before=None),
        lambda d: d.update(plan=[1]),
        lambda d: d["steps"][0].update(ok="yes"),
        lambda d: d["steps"][0].pop("at"),
        lambda d: d.update(skips=[{"name": "x", "reason": "", "at": d["started_at"]}]),
        lambda d: d.update(followups=[{"step": "a", "reason": "r"}, {"step": "a", "reason": "s"}]),
    ],
)
def test_from_dict_rejects_hand_edits(corrupt):
    d = _valid()
    assert Receipt.from_dict(d).outcome == "refused"
    corrupt(d)
    with pytest.raises(ReceiptError):
        Receipt.from_dict(d)


def test_from_dict_rejects_non_objects():
    for value in (None, [], "receipt", 1):
        with pytest.raises(ReceiptError):
            Receipt.from_dict(value)


# --- exit codes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "committed", "code"),
    [
        ("success", False, 0),  # already up to date
        ("success", True, 0),  # committed, with or without follow-ups
        ("partial", True, 1),  # the parked autostash
        ("partial", False, 1),  # the parked stash of an interrupted update this one finished
        ("failed", False, 1),  # nothing committed, or rolled back
        ("refused", False, 2),  # refused or concurrent
        ("interrupted", False, 130),
        ("interrupted", True, 130),  # Ctrl-C after the commit point
    ],
)
def test_exit_code_for(outcome, committed, code):
    assert exit_code_for(outcome, committed=committed) == code


@pytest.mark.parametrize(
    ("outcome", "committed"),
    [("failed", True), ("refused", True), ("running", False), ("bogus", True)],
)
def test_exit_code_for_impossible_combinations(outcome, committed):
    with pytest.raises(ReceiptError):
        exit_code_for(outcome, committed=committed)


# --- the store ------------------------------------------------------------------------------


def test_write_names_the_file_and_points_latest_at_it(tmp_path):
    store = ReceiptStore(tmp_path)
    r = begin("abc123")
    path = store.write(r)
    assert path == tmp_path / "logs" / "update_receipts" / f"update_20260801_123045_{os.getpid()}_abc123.json"
    assert path == store.path_for(r)
    assert oct(os.stat(store.directory).st_mode & 0o777) == oct(0o755)
    assert json.loads(path.read_text())["outcome"] == "running"  # on disk from the first moment
    pointer = json.loads(store.latest_path.read_text())
    assert pointer == {"path": path.name, "update_id": "abc123", "outcome": "running"}

    r.step("plan", True)
    r.finish("success", 0)
    assert store.write(r) == path  # rewritten in place at every boundary
    latest = store.latest()
    assert latest is not None and latest.outcome == "success" and latest["steps"][0]["name"] == "plan"
    assert json.loads(store.latest_path.read_text())["outcome"] == "success"


def test_started_at_in_another_zone_names_by_utc(tmp_path):
    at = datetime(2026, 8, 1, 14, 30, 45, tzinfo=timezone(timedelta(hours=2)))
    assert ReceiptStore(tmp_path).path_for(begin(at=at)).name.startswith("update_20260801_123045_")


def test_no_secret_reaches_disk(tmp_path):
    store = ReceiptStore(tmp_path)
    r = Receipt.begin("u1", ["hermes", "update", "--token", "argvsecret123"], current_identity(), BEFORE, at=T0)
    r.step("auth", False, {"access_token": "opaque-access-value", "response": {"id_token": JWT}, "note": f"got {JWT}"})
    r.step("portal", True, f"signed in as {ANON}")
    remote = "https://bot:hunter2secret@example.com/repo.git"
    r.set("plan", {"remote": remote, "headers": {"Authorization": "Bearer zzz"}})
    r.finish("failed", 1)
    path = store.write(r)
    raw = path.read_bytes()
    leaks = [b"opaque-access-value", b"eyJhbGciOi", JWT.encode(), ANON.encode(), b"argvsecret123", b"hunter2secret"]
    for secret in [*leaks, b"zzz"]:
        assert secret not in raw, secret
    assert raw.count(REDACTED.encode()) >= 6
    assert r["steps"][0]["detail"]["access_token"] == "opaque-access-value"  # in memory the run still has it
    assert Receipt.from_dict(json.loads(raw)).outcome == "failed"  # redacted, still a valid receipt


def test_keeps_the_newest_twenty(tmp_path):
    store = ReceiptStore(tmp_path)
    paths = []
    for i in range(25):
        r = begin(f"u{i:02d}", at=T0 + timedelta(minutes=i))
        paths.append(store.write(r))
        sibling = paths[-1].with_suffix(".request.json")  # a completion's request file goes with its receipt
        sibling.write_text("{}")
    left = sorted(p.name for p in store.directory.glob("update_*_*.json") if p.name.count(".") == 1)
    assert left == [p.name for p in paths[-KEEP:]]
    assert not paths[4].with_suffix(".request.json").exists()
    assert paths[5].with_suffix(".request.json").exists()
    receipts, problems = store.all()
    assert [r.update_id for r in receipts] == [f"u{i:02d}" for i in range(24, 4, -1)]  # newest first
    assert problems == []


def test_an_older_receipt_named_by_latest_is_never_pruned(tmp_path):
    store = ReceiptStore(tmp_path)
    old = begin("old", at=T0 - timedelta(days=1))
    for i in range(KEEP):
        store.write(begin(f"u{i:02d}", at=T0 + timedelta(minutes=i)))
    path = store.write(old)  # the running update writes again after newer ones exist
    assert path.exists()
    assert store.latest().update_id == "old"


def test_latest_without_any_receipt_is_none(tmp_path):
    store = ReceiptStore(tmp_path)
    assert store.latest() is None
    assert store.all() == ([], [])
    assert store.mark_interrupted() == []
    assert not store.directory.exists()  # reading creates nothing


def test_latest_without_a_pointer_is_the_newest_file(tmp_path):
    store = ReceiptStore(tmp_path)
    store.write(begin("a", at=T0))
    store.write(begin("b", at=T0 + timedelta(seconds=1)))
    store.latest_path.unlink()
    assert store.latest().update_id == "b"


@pytest.mark.parametrize(
    "pointer",
    [
        b"",
        b"{not json",
        b"[]",
        b'{"path": "../../etc/passwd"}',
        b'{"path": 3}',
        b'{"path": "update_20260801_123045_1_gone.json"}',
    ],
)
def test_a_broken_pointer_raises(tmp_path, pointer):
    store = ReceiptStore(tmp_path)
    store.write(begin())
    store.latest_path.write_bytes(pointer)
    with pytest.raises(StateFileCorrupt):
        store.latest()


def test_a_broken_target_raises_and_is_listed(tmp_path):
    store = ReceiptStore(tmp_path)
    good = store.write(begin("good", at=T0))
    bad = store.write(begin("bad", at=T0 + timedelta(seconds=1)))
    data = json.loads(bad.read_text())
    data["outcome"] = "fine"
    bad.write_text(json.dumps(data))
    with pytest.raises(ReceiptError, match="bad"):
        store.latest()
    bad.write_text("{")
    with pytest.raises(StateFileCorrupt):
        store.latest()
    receipts, problems = store.all()
    assert [r.update_id for r in receipts] == ["good"]
    assert [p.path for p in problems] == [bad]
    assert problems[0].to_dict()["path"] == str(bad) and "JSON" in problems[0].to_dict()["reason"]
    assert good.exists()


def test_a_reused_pid_with_another_start_time_is_dead(tmp_path):
    store = ReceiptStore(tmp_path)
    me = current_identity()
    store.write(begin("reused", identity=ProcessIdentity(me.pid, me.start_time + 1)))
    assert [r.update_id for r in store.mark_interrupted()] == ["reused"]


def test_free_lock_has_no_holder(tmp_path):
    assert holder(tmp_path) is None
    assert stale_holder(tmp_path) is None
    with UpdateLock(tmp_path).acquire("u1") as lock:
        assert lock.held and lock.recovered is None
        mine = holder(tmp_path)
        assert mine is not None and mine["update_id"] == "u1" and mine["pid"] == os.getpid()
    assert not lock.held
    assert holder(tmp_path) is None
    assert stale_holder(tmp_path) is None  # a clean release leaves no record
    assert not (tmp_path / "update.lock.json").exists()


def test_a_second_lock_in_this_process_is_refused_too(tmp_path):
    with UpdateLock(tmp_path).acquire("one"):
        with pytest.raises(UpdateInProgress, match=f"pid {os.getpid()}"):
            UpdateLock(tmp_path).acquire("two")


def test_lock_misuse(tmp_path):
    lock = UpdateLock(tmp_path)
    with pytest.raises(RuntimeError):
        with lock:
            pass
    with pytest.raises(InvalidUpdateId):
        lock.acquire("no/slashes")
    lock.acquire("u1")
    with pytest.raises(RuntimeError):
        lock.acquire("u1")
    lock.release()
    lock.release()  # idempotent


def test_a_refusal_in_the_holders_gap_waits_for_its_record_to_name_the_update(tmp_path):
    # The holder has its flock but has not written its record yet: the refusal names its update
    # once the record appears, not an anonymous pid.
    flock = FileLock(tmp_path / "update.lock")
    flock.acquire()
    me = current_identity()
    record = {"pid": me.pid, "start_time": me.start_time, "update_id": "winner", "started_at": "2026-01-01T00:00:00"}
    writer = threading.Timer(0.2, write_json_atomic, (tmp_path / "update.lock.json", record))
    writer.start()
    try:
        with pytest.raises(UpdateInProgress) as refused:
            UpdateLock(tmp_path).acquire("loser")
    finally:
        writer.join()
        flock.release()
    assert (refused.value.holder["pid"], refused.value.holder["update_id"]) == (me.pid, "winner")


def test_a_holder_that_never_writes_its_record_is_named_by_pid_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(lock_module, "RECORD_GRACE", 0.05)
    with FileLock(tmp_path / "update.lock"):
        with pytest.raises(UpdateInProgress) as refused:
            UpdateLock(tmp_path).acquire("loser")
    assert (refused.value.holder["pid"], refused.value.holder["update_id"]) == (os.getpid(), None)


def _ended(update_id: str, minute: int, outcome: str):
    receipt = begin(update_id, at=T0 + timedelta(minutes=minute))
    receipt.finish(outcome, exit_code_for(outcome, committed=False))
    return receipt


def test_the_count_of_each_outcome_keeps_what_was_pruned_and_never_counts_a_receipt_twice(tmp_path):
    store = ReceiptStore(tmp_path)
    outcomes = [SUCCESS if i % 3 else FAILED for i in range(KEEP + 7)]
    for i, outcome in enumerate(outcomes):
        store.write(_ended(f"u{i:02d}", i, outcome))
    store.write(begin("running", at=T0 + timedelta(hours=2)))  # not ended: not counted
    expected = {SUCCESS: outcomes.count(SUCCESS), FAILED: outcomes.count(FAILED)}
    counts, problems = store.outcome_counts()
    assert counts == expected and problems == []
    assert len(store.all()[0]) == KEEP  # 8 were pruned, and still counted
    # A prune killed after its tally, before its deletions, is done again: counted once.
    names = store._receipt_names()
    store._count_pruned(names[:3])
    store._count_pruned(names[:3])
    tallied, _ = store._tally()
    assert tallied == max(names[:3])


def test_a_torn_tally_counts_afresh_from_the_receipts_kept(tmp_path):
    store = ReceiptStore(tmp_path)
    for i in range(KEEP + 2):
        store.write(_ended(f"u{i:02d}", i, SUCCESS))
    (store.directory / "pruned.json").write_text("{torn")
    counts, _ = store.outcome_counts()
    assert counts == {SUCCESS: KEEP}
    store.write(_ended("u99", 99, SUCCESS))  # the next prune writes a whole tally again
    assert store.outcome_counts()[0] == {SUCCESS: KEEP + 1}
