"""What the scan reads of other real processes: every pid, a process's environment, and the
pid it knows itself by in its own pid namespace."""

from __future__ import annotations

import subprocess
import sys

import psutil
import pytest

from shared.identity import all_pids, own_pid, read_environ
from tests.support.processes import python_env, wait_for


def test_a_process_environment_and_own_pid_are_read_as_it_started(spawn):
    peer = spawn("-c", "print('ready', flush=True); import time; time.sleep(60)", env=python_env(HERMES_HOME="/x y/=z"))
    assert peer.pid in all_pids()
    assert read_environ(peer.pid)["HERMES_HOME"] == "/x y/=z"  # split at the first '=' only
    assert own_pid(peer.pid) == peer.pid  # same pid namespace as ours
    peer.kill()
    assert (read_environ(peer.pid), own_pid(peer.pid)) == (None, None)


def test_a_process_in_a_new_pid_namespace_knows_itself_as_pid_1():
    argv = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", sys.executable, "-c"]
    probe = subprocess.run([*argv, "pass"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare cannot make a pid namespace here: {probe.stderr.decode().strip()}")
    proc = subprocess.Popen([*argv, "import time; time.sleep(60)"])
    try:
        child = wait_for(lambda: psutil.Process(proc.pid).children(), timeout=10, what="the child")[0]
        assert own_pid(child.pid) == 1 != child.pid
    finally:
        proc.kill()
        proc.wait(timeout=10)
