"""The reporter's identity rules against real processes: a reporter that is gone, a really
recycled pid where this machine allows it, and the launch identity rule."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from services.hook_reporter.checks import identity_refusal, launch_refusal
from shared.hook_reports import Launch
from shared.identity import process_identity
from tests.support.hook_reports import report_for


def test_a_reporter_that_is_gone_is_refused():
    child = subprocess.Popen(["true"])
    ident = process_identity(child.pid)
    child.wait()
    assert identity_refusal(report_for(ident.pid, ident.start_time)) == "process_gone"


def _spawn_with_pid(pid: int) -> subprocess.Popen | None:
    """A new process holding ``pid``, by setting the kernel's last-pid (root, Linux only)."""
    for _ in range(20):
        try:
            with open("/proc/sys/kernel/ns_last_pid", "w") as f:
                f.write(str(pid - 1))
        except OSError:
            return None
        child = subprocess.Popen(["sleep", "30"])
        if child.pid == pid:
            return child
        child.kill()
        child.wait()
    return None


def test_a_really_recycled_pid_is_not_taken_for_the_reporter():
    first = subprocess.Popen(["sleep", "30"])
    reported = process_identity(first.pid)
    first.kill()
    first.wait()
    # Start times count clock ticks (10 ms): a pid reused within the same tick cannot be told
    # apart by anyone, the daemon included. Real reuse waits for the pid space to wrap.
    time.sleep(0.05)
    second = _spawn_with_pid(reported.pid)
    if second is None:
        pytest.skip(
            "this machine does not let a test choose the next pid (needs root and /proc/sys/kernel/ns_last_pid)"
        )
    try:
        assert process_identity(second.pid).start_time != reported.start_time
        assert identity_refusal(report_for(reported.pid, reported.start_time)) == "identity_mismatch"
    finally:
        second.kill()
        second.wait()


@pytest.fixture
def entrypoint(tmp_path):
    """A ``hermes``-like entry script whose shebang interpreter runs it itself."""
    script = tmp_path / "hermes"
    script.write_text(f"#!{os.path.realpath(sys.executable)}\nimport time\nprint('up', flush=True)\ntime.sleep(30)\n")
    script.chmod(0o755)
    return script


def started(argv, **kwargs):
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, **kwargs)
    assert process.stdout.readline().strip() == b"up"
    return process


def test_the_pty_root_on_its_launch_image_and_script_may_set_the_native_reference(entrypoint, tmp_path):
    root = started([str(entrypoint)])
    try:
        frozen = Launch(os.path.realpath(sys.executable), str(entrypoint), root.pid)
        ident = process_identity(root.pid)
        assert launch_refusal(report_for(root.pid, ident.start_time, frozen)) is None
        # The same script started as a relative path from its own directory is the same script.
        relative = started([sys.executable, "hermes"], cwd=tmp_path)
        try:
            again = Launch(os.path.realpath(sys.executable), str(entrypoint), relative.pid)
            assert launch_refusal(report_for(relative.pid, 0, again)) is None
        finally:
            relative.kill()
        # Another process of the session may not set it, even running the same script.
        assert launch_refusal(report_for(relative.pid, 0, frozen)) == "not_pty_root"
    finally:
        root.kill()


def test_an_interpreter_that_re_executes_another_image_is_refused(tmp_path):
    # The launcher froze /bin/sh as the shebang interpreter; the script exec's Python instead.
    shim = tmp_path / "hermes"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -c \"print('up', flush=True); import time; time.sleep(30)\"\n")
    shim.chmod(0o755)
    process = started([str(shim)])
    try:
        frozen = Launch(os.path.realpath("/bin/sh"), str(shim), process.pid)
        assert launch_refusal(report_for(process.pid, 0, frozen)) == "image_mismatch"
    finally:
        process.kill()


def test_another_script_on_the_same_interpreter_is_refused(entrypoint, tmp_path):
    other = tmp_path / "other.py"
    other.write_text("import time\nprint('up', flush=True)\ntime.sleep(30)\n")
    process = started([sys.executable, str(other)])
    try:
        frozen = Launch(os.path.realpath(sys.executable), str(entrypoint), process.pid)
        assert launch_refusal(report_for(process.pid, 0, frozen)) == "cmdline_mismatch"
        missing = Launch(None, None, process.pid)  # a session left without a launch identity
        assert launch_refusal(report_for(process.pid, 0, missing)) == "image_mismatch"
    finally:
        process.kill()
