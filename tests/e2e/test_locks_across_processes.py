"""The endpoint lock against real processes: held, released, and left behind by kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shared.identity import current_identity
from shared.locks import FileLock, LockHeld, probe
from tests.support.processes import ROOT

_HOLD = """
    import sys, time
    from shared.locks import FileLock
    lock = FileLock(sys.argv[1])
    lock.acquire()
    print("ready", flush=True)
    time.sleep(60)
"""


@pytest.fixture
def holder(spawn):
    """A real process holding the lock; killed at the end of the test."""

    def start(path: Path) -> subprocess.Popen:
        return spawn("-c", textwrap.dedent(_HOLD), str(path)).proc

    return start


def test_lock_held_by_another_process_names_its_pid(tmp_path, holder):
    path = tmp_path / "gateway.lock"
    proc = holder(path)
    with pytest.raises(LockHeld) as info:
        FileLock(path).acquire()
    assert info.value.holder is not None
    assert info.value.holder.pid == proc.pid
    assert f"pid {proc.pid}" in info.value.message


def test_probe_live_holder_then_kill_9(tmp_path, holder):
    path = tmp_path / "gateway.lock"
    proc = holder(path)
    status = probe(path)
    assert (status.exists, status.held, status.stale) == (True, True, False)
    assert status.holder is not None and status.holder.pid == proc.pid
    # Probing takes nothing away from the holder and keeps nothing itself.
    assert probe(path).held

    proc.send_signal(signal.SIGKILL)
    proc.wait()
    status = probe(path)
    assert (status.exists, status.held, status.stale) == (True, False, True)
    assert status.holder is not None and status.holder.pid == proc.pid  # the last holder, for doctor

    with FileLock(path) as lock:
        assert lock.held
        assert probe(path).holder == current_identity()


def test_lock_fd_is_not_inherited_by_children(tmp_path):
    path = tmp_path / "gateway.lock"
    # The holder starts a grandchild that would keep the lock alive had it inherited the fd.
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import subprocess, sys, time
                from shared.locks import FileLock
                FileLock(sys.argv[1]).acquire()
                child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], close_fds=False)
                print(child.pid, flush=True)
                time.sleep(60)
                """
            ),
            str(path),
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    grandchild = int(parent.stdout.readline())
    try:
        assert probe(path).held
        parent.kill()
        parent.wait()
        assert not probe(path).held
    finally:
        os.kill(grandchild, signal.SIGKILL)


def test_a_child_given_the_lock_keeps_it_after_the_holder_is_killed(tmp_path):
    """How the updater's completion keeps a second update out when the updater dies."""
    import time

    path = tmp_path / "shared.lock"
    program = (
        "import subprocess, sys, time; from pathlib import Path; from shared.locks import FileLock\n"
        "lock = FileLock(Path(sys.argv[1])); lock.acquire()\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], pass_fds=(lock.fileno(),))\n"
        "print(child.pid, flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen([sys.executable, "-c", program, str(path)], stdout=subprocess.PIPE, text=True)
    child_pid = int(parent.stdout.readline())
    try:
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        assert probe(path).held  # the child still has the descriptor
        os.kill(child_pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while probe(path).held and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not probe(path).held
    finally:
        try:
            os.kill(child_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
