"""Receipts and the update lock against real processes: runs marked interrupted only when
dead, and a second update refused naming the holder, then let in after kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from services.updater.lock import UpdateInProgress, UpdateLock, holder, stale_holder
from services.updater.receipt import Receipt
from services.updater.receipt_store import ReceiptStore
from shared.identity import ProcessIdentity, is_alive, process_identity
from tests.support.updater import T0, begin


def dead_identity() -> ProcessIdentity:
    """The identity of a real process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ident = process_identity(proc.pid)
    proc.kill()
    proc.wait()
    assert ident is not None and not is_alive(ident)
    return ident


def test_mark_interrupted_changes_only_dead_runs(tmp_path):
    store = ReceiptStore(tmp_path)
    dead = begin("dead", identity=dead_identity(), at=T0)
    store.write(dead)
    live = begin("live", at=T0 + timedelta(seconds=1))
    store.write(live)
    done = begin("done", identity=dead_identity(), at=T0 - timedelta(seconds=1))
    done.finish("success", 0)
    store.write(done)
    store.write(live)  # latest points at the live one

    found = T0 + timedelta(hours=1)
    changed = store.mark_interrupted(by="next1", at=found)
    assert [r.update_id for r in changed] == ["dead"]
    marked = Receipt.from_dict(json.loads(store.path_for(dead).read_text()))
    assert (marked.outcome, marked.exit_code) == ("interrupted", 130)
    note = marked["steps"][-1]
    assert note["name"] == "interrupted" and not note["ok"]
    assert "found interrupted by update next1 at 2026-08-01T13:30:45.000+00:00" in note["detail"]
    assert f"pid {dead.identity.pid}" in note["detail"]
    assert json.loads(store.path_for(live).read_text())["outcome"] == "running"
    assert json.loads(store.path_for(done).read_text())["outcome"] == "success"
    assert store.latest().update_id == "live"
    assert store.mark_interrupted() == []  # idempotent


def test_mark_interrupted_refreshes_the_pointer_it_names(tmp_path):
    store = ReceiptStore(tmp_path)
    store.write(begin("dead", identity=dead_identity()))
    store.mark_interrupted()
    assert json.loads(store.latest_path.read_text())["outcome"] == "interrupted"
    assert store.latest().outcome == "interrupted"


# --- the lock -------------------------------------------------------------------------------

_HOLD = """
    import sys, time
    from pathlib import Path
    from services.updater.lock import UpdateLock
    UpdateLock(Path(sys.argv[1])).acquire(sys.argv[2])
    print("ready", flush=True)
    time.sleep(60)
"""


@pytest.fixture
def hold(spawn):
    """A real process holding the lock; killed at the end of the test."""

    def start(root: Path, update_id: str) -> subprocess.Popen:
        return spawn("-c", textwrap.dedent(_HOLD), str(root), update_id).proc

    return start


def test_second_update_is_refused_naming_the_holder_then_recovers_after_kill_9(tmp_path, hold):
    proc = hold(tmp_path, "first")
    held = holder(tmp_path)
    assert held is not None and (held["pid"], held["update_id"]) == (proc.pid, "first")

    lock = UpdateLock(tmp_path)
    with pytest.raises(UpdateInProgress) as info:
        lock.acquire("second")
    err = info.value
    assert err.code == "update_in_progress"
    assert f"pid {proc.pid}" in err.message and "first" in err.message
    assert err.detail["pid"] == proc.pid and err.detail["update_id"] == "first"
    assert err.detail["start_time"] == process_identity(proc.pid).start_time
    assert not lock.held

    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert holder(tmp_path) is None
    stale = stale_holder(tmp_path)
    assert stale is not None and (stale["pid"], stale["update_id"]) == (proc.pid, "first")

    with lock.acquire("second"):
        assert lock.recovered is not None and lock.recovered["pid"] == proc.pid
        now = holder(tmp_path)
        assert now is not None and (now["pid"], now["update_id"]) == (os.getpid(), "second")
        assert stale_holder(tmp_path) is None
