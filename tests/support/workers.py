"""Stopping a test home's install-wide workers, and failing loudly when one is left running.

A worker left behind outlives its test, its home and often the whole run, so a fixture
checks after the stop: any process still running one of the workers (``python -m
services.<worker>``) with that home as its ``HERMES_HOME`` is a leak. It is killed, by its
pid (it runs on the test's own home), and the teardown fails naming it.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from shared.identity import all_pids, process_identity, read_cmdline, read_environ
from shared.spawn import WORKERS, stop_workers
from tests.support.processes import gone, wait_for


def stop_and_check_workers(root: Path) -> None:
    """Stop ``root``'s workers (``shared.spawn.stop_workers``); raise ``AssertionError`` if
    a process of one of them still runs after that, once it is killed."""
    stop_workers(root)
    left = workers_running(root)
    for pid in left:
        _kill(pid)
    if left:
        raise AssertionError(
            f"workers of {root} still ran after their stop (killed now): "
            + "; ".join(f"pid {pid}: {' '.join(argv)}" for pid, argv in left.items())
        )


def workers_running(root: Path) -> dict[int, list[str]]:
    """The live processes running a worker of ``root``: pid and command line."""
    wanted = {f"services.{name}" for name in WORKERS}
    found: dict[int, list[str]] = {}
    for pid in all_pids():
        argv = read_cmdline(pid) or []
        if not wanted & set(argv[1:3]) or (read_environ(pid) or {}).get("HERMES_HOME") != str(root):
            continue
        if process_identity(pid) is not None and not gone(pid):
            found[pid] = argv
    return found


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    wait_for(lambda: gone(pid), timeout=10, what=f"leaked worker pid {pid} to die")
