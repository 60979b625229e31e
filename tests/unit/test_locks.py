"""The endpoint lock within this process: held, released, probed."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from shared.identity import ProcessIdentity, current_identity
from shared.locks import FileLock, LockHeld, LockNotHandedOn, probe


def test_acquire_records_identity_and_release_keeps_file(tmp_path):
    path = tmp_path / "gateway.lock"
    lock = FileLock(path)
    lock.acquire()
    try:
        assert lock.held
        assert json.loads(path.read_text()) == current_identity().to_dict()
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    finally:
        lock.release()
    assert not lock.held
    assert path.exists()
    lock.release()  # idempotent


def test_second_lock_in_same_process_is_refused(tmp_path):
    path = tmp_path / "gateway.lock"
    with FileLock(path) as first:
        with pytest.raises(LockHeld) as info:
            FileLock(path).acquire()
        assert first.held
    err = info.value
    assert err.code == "endpoint_busy"
    assert err.holder == current_identity()
    assert f"pid {os.getpid()}" in err.message
    assert err.to_dict()["detail"]["holder"] == current_identity().to_dict()


def test_release_then_reacquire(tmp_path):
    path = tmp_path / "gateway.lock"
    lock = FileLock(path)
    with lock:
        pass
    with lock:
        assert lock.held
    with FileLock(path):
        pass


def test_double_acquire_of_one_object_is_a_bug(tmp_path):
    with FileLock(tmp_path / "x.lock") as lock:
        with pytest.raises(RuntimeError):
            lock.acquire()


def test_lock_held_with_unreadable_holder(tmp_path):
    path = tmp_path / "gateway.lock"
    with FileLock(path):
        path.write_text("garbage")  # the holder record is best-effort
        with pytest.raises(LockHeld) as info:
            FileLock(path).acquire()
    assert info.value.holder is None
    assert "another process" in info.value.message
    assert probe(path).holder is None


def test_probe_missing(tmp_path):
    path = tmp_path / "absent.lock"
    status = probe(path)
    assert (status.exists, status.held, status.holder, status.stale) == (False, False, None, False)
    assert not path.exists()


def test_probe_of_own_lock_and_after_release(tmp_path):
    path = tmp_path / "gateway.lock"
    with FileLock(path):
        status = probe(path)
        assert status.held and status.holder == current_identity()
    assert probe(path).stale


def test_lock_held_round_trips_holder_identity():
    ident = ProcessIdentity(1234, 99)
    err = LockHeld(Path("/x/gateway.lock"), ident)
    assert ProcessIdentity.from_dict(err.to_dict()["detail"]["holder"]) == ident


def test_a_lock_handed_on_over_an_exec_is_adopted_only_as_that_held_file(tmp_path):
    held = FileLock(tmp_path / "svc.lock")
    held.acquire()
    os.set_inheritable(held.fileno(), True)
    other = os.open(tmp_path / "other", os.O_RDWR | os.O_CREAT)
    stranger = os.open(tmp_path / "svc.lock", os.O_RDONLY)  # the same file, but not its lock
    try:
        with pytest.raises(LockNotHandedOn, match="another file"):
            FileLock.adopt(tmp_path / "svc.lock", other)
        with pytest.raises(LockNotHandedOn, match="locked by another"):
            FileLock.adopt(tmp_path / "svc.lock", stranger)
        with pytest.raises(LockNotHandedOn):
            FileLock.adopt(tmp_path / "svc.lock", 9999)
        adopted = FileLock.adopt(tmp_path / "svc.lock", held.fileno())
        assert adopted.held and not os.get_inheritable(adopted.fileno())
        assert probe(tmp_path / "svc.lock").held
    finally:
        os.close(other)
        os.close(stranger)
        held.release()
    assert not probe(tmp_path / "svc.lock").held
