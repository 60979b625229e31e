"""A signal the mesh sends to a process it identified never reaches a newcomer that took its
pid: a real process dies, is reaped, and its pid is handed to another (forced, in a pid
namespace of the test's own), and every way the mesh signals the first then reaches nobody."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.support.processes import ROOT, python_env

# Run in a fresh pid namespace, whose pids this script may choose (ns_last_pid).
RECYCLE = r"""
import json, signal, subprocess, time
from shared.identity import process_identity
from shared.process_signals import HeldProcess, signal_identified

def newcomer_on(pid):
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(pid - 1))
    return subprocess.Popen(["sleep", "60"], start_new_session=True)

out = {}
first = subprocess.Popen(["sleep", "60"], start_new_session=True)  # a group leader, as supervisord's programs
ident = process_identity(first.pid)
held = HeldProcess.hold(ident)  # checked while it lives, as a stop does before its wait
out["held"] = held is not None and held.alive()
time.sleep(0.05)  # a few clock ticks: start times are in ticks, and a real recycle takes far longer
first.kill()
first.wait()  # reaped: its pid is free
newcomer = newcomer_on(first.pid)
out["recycled"] = newcomer.pid == first.pid and process_identity(newcomer.pid) != ident
out["held_signal"] = held.signal(signal.SIGKILL)
out["held_group_signal"] = held.signal(signal.SIGKILL, group=True)
out["held_alive"] = held.alive()
out["signal_identified"] = signal_identified(ident, signal.SIGKILL)
out["group_signal_identified"] = signal_identified(ident, signal.SIGKILL, group=True)
out["hold_again"] = HeldProcess.hold(ident) is not None
held.close()
out["newcomer_alive"] = newcomer.poll() is None
newcomer.kill()
newcomer.wait()
print(json.dumps(out))
"""


def test_no_signal_for_a_dead_process_reaches_the_newcomer_on_its_pid():
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a pid namespace of the test's own needs root and unshare")
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGKILL", sys.executable, "-c", RECYCLE],
        cwd=ROOT,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0 and "unshare" in done.stderr and "Operation not permitted" in done.stderr:
        pytest.skip(f"this machine refuses pid namespaces: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["held"] and out["recycled"], out  # the setup held: the pid now names another process
    assert out == {
        "held": True,
        "recycled": True,
        "held_signal": False,
        "held_group_signal": False,
        "held_alive": False,
        "signal_identified": False,
        "group_signal_identified": False,
        "hold_again": False,
        "newcomer_alive": True,
    }
