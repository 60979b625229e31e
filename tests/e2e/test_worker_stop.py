"""Stopping the install-wide workers leaves none running: not one that was re-executing onto
new code when its stop came, nor one that another worker was starting when that one was stopped."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import psutil

from services.handoff_retry import ops
from shared import faults, homes
from shared.errors import HermesError
from shared.spawn import stop_service, stop_workers
from shared.transport.call_rules import NO_RETRY
from shared.transport.sync_client import SyncClient
from tests.support.installs import release
from tests.support.processes import ROOT, gone, python_env, wait_for


def test_a_worker_stopped_while_it_re_executes_onto_new_code_stays_stopped(code, short_dir):
    root = short_dir / "home"
    root.mkdir()
    step = "worker:reexec:handoff_retry"
    env = {**python_env(HERMES_HOME=str(root), **{faults.ENV: step}), "PYTHONPATH": str(code)}
    said = short_dir / "worker.err"
    with open(said, "wb") as stderr:
        worker = subprocess.Popen(
            [sys.executable, "-m", "services.handoff_retry"], cwd=code, env=env, stdin=subprocess.DEVNULL, stderr=stderr
        )
    address = homes.endpoint(root, ops.SERVICE, create=False).control
    try:
        wait_for(lambda: _code_sha(address), timeout=30, what="the worker to know its code")
        release(code)
        _wait_paused(said, step)  # it has stopped serving, to exec the new code
        stopped = stop_service(root, "handoff_retry")
        if worker.poll() is None:
            worker.send_signal(faults.RESUME_SIGNAL)  # were it still there, it would exec now
        wait_for(lambda: worker.poll() is not None, timeout=20, what="the worker to stay stopped")
        assert stopped == worker.pid
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.wait(timeout=10)


def test_a_worker_stopped_while_it_starts_another_leaves_neither_running(root):
    """The auth worker starts the handoff retry worker; held before it takes its lock, that one
    is not yet anything a stop can find, so the auth worker's stop must end it."""
    step = "worker:start:handoff_retry"
    auth = subprocess.Popen(
        [sys.executable, "-m", "services.auth_worker"],
        cwd=ROOT,
        env=python_env(HERMES_HOME=str(root), **{faults.ENV: step}),
        stdin=subprocess.DEVNULL,
    )
    started: list[int] = []
    try:
        _wait_paused(root / "logs" / "handoff_retry.log", step)
        started = [c.pid for c in psutil.Process(auth.pid).children() if "services.handoff_retry" in c.cmdline()]
        assert len(started) == 1
        stopped = stop_workers(root)
        assert stopped["auth_worker"] == auth.pid
        wait_for(lambda: gone(started[0]), timeout=20, what="the retry worker the auth worker started to be gone")
        assert auth.wait(timeout=10) == 0  # it stopped on SIGTERM, not by SIGKILL
    finally:
        for pid in started:
            if not gone(pid):
                psutil.Process(pid).send_signal(signal.SIGKILL)
        if auth.poll() is None:
            auth.kill()
        auth.wait(timeout=10)


def _code_sha(address: str) -> str | None:
    try:
        with SyncClient(address, retry=NO_RETRY) as client:
            return client.call(ops.STATUS, timeout=2)["code_sha"]
    except HermesError:
        return None


def _wait_paused(stderr: Path, step: str) -> None:
    def said() -> str:
        return stderr.read_text(errors="replace") if stderr.exists() else ""

    try:
        wait_for(lambda: f"paused {step}\n" in said(), timeout=30, what=f"the pause at {step}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; it said: {said()[-2000:]}") from None
