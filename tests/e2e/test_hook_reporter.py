"""Hook reports end to end: real gateways and a real PTY-root process report through the
reporter to the operator daemon simulator, with their start identities checked; a down,
slow or flooded daemon and junk on the intake change nothing for the reporting process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import msgpack
import pytest
import zmq

from services.hook_reporter import ops
from shared import homes
from shared.gateways import ops as gateway_ops
from shared.hooks import intake_address
from shared.identity import process_identity
from shared.operator.client import DaemonClient
from shared.transport.call_rules import NO_RETRY
from shared.transport.sync_client import SyncClient
from simulators.operator_sim.ops import SIM_CONFIGURE, SIM_RECORDS
from tests.support.cli import hermes
from tests.support.processes import ROOT, python_env, wait_for
from tests.support.session_daemon import SessionDaemon, start_reporter


@pytest.fixture
def daemon(short_dir):
    simulator = SessionDaemon(short_dir)
    yield simulator.address
    simulator.stop()


def call(address, spec, args=None, timeout=5.0):
    client = DaemonClient(address) if spec.name.startswith("sim.") else SyncClient(address, retry=NO_RETRY)
    with client:
        return client.call(spec, args, timeout=timeout)


def _try(fn):
    try:
        return fn()
    except Exception:
        return None


def records(daemon):
    return call(daemon, SIM_RECORDS)["records"]


def managed_env(root, **extra):
    return python_env(HERMES_HOME=str(root), POHUNEK_SESSION_ID="sess-1", **extra)


def test_gateway_turns_report_activity_with_the_gateways_identity(root, daemon, spawn):
    reporter = start_reporter(root, daemon)
    gateway = subprocess.Popen(
        [sys.executable, "-m", "services.gateway"],
        cwd=ROOT,
        env=managed_env(root),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        control = homes.endpoint(root, gateway_ops.SERVICE, create=False).control
        wait_for(
            lambda: (_try(lambda: call(control, gateway_ops.STATUS)) or {}).get("state") == "running",
            timeout=20,
            what="the gateway",
        )
        call(control, gateway_ops.TURN, {"text": "a secret prompt", "seconds": 0.1})
        seen = wait_for(
            lambda: [r["state"] for r in records(daemon)][-2:] == ["working", "idle"] and records(daemon),
            timeout=20,
            what="the turn's reports",
        )
        ident = process_identity(gateway.pid)
        assert {(r["pid"], r["start_time"], r["session"]) for r in seen} == {(ident.pid, ident.start_time, "sess-1")}
        assert all("secret" not in str(r) for r in seen)
        status = call(reporter, ops.STATUS)
        assert status["forwarded"] == len(seen) and status["dropped"] == {}
    finally:
        gateway.terminate()
        gateway.wait(timeout=15)


PTY_ROOT = """#!{python}
import sys
from shared import hooks
hooks.report_native_id(sys.argv[1])
hooks.report_activity("working")
print("reported", flush=True)
sys.stdin.read()  # stay alive until the test is done: a report's process is checked while it runs
"""


def test_only_the_pty_root_on_its_launch_image_sets_the_native_reference(root, daemon, tmp_path):
    reporter = start_reporter(root, daemon)
    entry = tmp_path / "hermes"
    entry.write_text(PTY_ROOT.format(python=sys.executable))  # the venv's, which has the packages
    entry.chmod(0o755)
    launch = {"POHUNEK_LAUNCH_EXE": os.path.realpath(sys.executable), "POHUNEK_LAUNCH_SCRIPT": str(entry)}
    # The PTY root: the launcher's shell exec's the entrypoint, so $$ is the root's own pid.
    root_proc = subprocess.Popen(
        ["sh", "-c", f'export POHUNEK_PTY_ROOT_PID=$$; exec "{entry}" conv_root'],
        cwd=ROOT,
        env=managed_env(root, **launch),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    # Another process of the session, same script and interpreter, claiming too.
    other = subprocess.Popen(
        [str(entry), "conv_other"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=managed_env(root, POHUNEK_PTY_ROOT_PID=str(root_proc.pid), **launch),
    )
    try:
        for process in (root_proc, other):
            assert process.stdout.readline().strip() == b"reported"
        done = wait_for(lambda: len(records(daemon)) >= 3 and records(daemon), timeout=20, what="the reports")
        natives = [(r["pid"], r["native_id"]) for r in done if r["kind"] == "native_id"]
        assert natives == [(root_proc.pid, "conv_root")]
        assert sorted(r["pid"] for r in done if r["kind"] == "activity") == sorted([root_proc.pid, other.pid])
        assert call(reporter, ops.STATUS)["dropped"] == {"launch_not_pty_root": 1}
        assert "worker.launch_identity.rejected" in (root / "reporter.log").read_text()
    finally:
        for process in (root_proc, other):
            process.kill()
            process.wait()


def test_a_down_slow_or_flooded_path_never_reaches_the_reporting_process(root, daemon, short_dir):
    reporter = start_reporter(root, daemon)
    call(daemon, SIM_CONFIGURE, {"slow_ms": 500})
    # Flood until 2000 reports were accepted (the reporter's queue holds 1024, and the slow
    # daemon takes one per 0.5 s), counting the calls refused on the way.
    flood = """
import sys, time
from shared import hooks
accepted, deadline = 0, time.monotonic() + 60
while accepted < 2000 and time.monotonic() < deadline:
    if hooks.report_activity("working" if accepted % 2 else "idle"):
        accepted += 1
    else:
        time.sleep(0.001)
print(accepted, hooks.counters()["not_accepted"], flush=True)
sys.stdin.read()
"""
    sender = subprocess.Popen(
        [sys.executable, "-c", flood],
        cwd=ROOT,
        env=managed_env(root),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        sent, not_accepted = map(int, sender.stdout.readline().split())
        assert sent == 2000  # every call returned, none raised
        status = wait_for(
            lambda: (s := call(reporter, ops.STATUS))["received"] == sent and s, timeout=30, what="intake"
        )
        assert status["dropped"].get("queue_full", 0) > 0  # the slow daemon's queue is bounded
        # Junk on the intake: counted, and the reporter keeps serving.
        junk = zmq.Context.instance().socket(zmq.PUSH)
        junk.connect(intake_address(root))
        for frame in (b"\xc1", b"not msgpack", b"\x80"):
            junk.send(frame)
        junk.send_multipart([msgpack.packb({"v": 1, "kind": "activity"}), b"extra"])  # two parts
        junk.close(linger=1000)
        wait_for(lambda: call(reporter, ops.STATUS)["dropped"].get("malformed") == 4, timeout=20, what="junk counted")
    finally:
        sender.kill()
        sender.wait()


def test_hostile_frames_are_counted_and_the_reporter_keeps_forwarding(root, daemon, short_dir):
    reporter = start_reporter(root, daemon)
    me = process_identity(os.getpid())
    envelope = {"v": 1, "kind": "activity", "pid": me.pid, "start_time": me.start_time, "at": 1.0}
    junk = zmq.Context.instance().socket(zmq.PUSH)
    junk.connect(intake_address(root))
    try:
        for hostile in (
            {**envelope, "session": "sess-1\n", "state": "idle"},  # an id with a trailing newline
            {**envelope, "session": "sess-1", "state": ["idle"]},  # unhashable where a word goes
            {**envelope, "session": "sess-1", "state": "idle", "pad": "x" * 2000},  # over the size
        ):
            junk.send(msgpack.packb(hostile))
        junk.send(msgpack.packb({**envelope, "session": "sess-1", "state": "idle"}))
    finally:
        junk.close(linger=1000)
    wait_for(lambda: len(records(daemon)) == 1, timeout=20, what="the well-formed report to be forwarded")
    [record] = records(daemon)
    assert (record["session"], record["state"], record["pid"]) == ("sess-1", "idle", me.pid)
    assert call(reporter, ops.STATUS)["dropped"] == {"malformed": 3}


def test_with_no_daemon_reports_are_counted_and_the_check_says_so(root, short_dir):
    reporter = start_reporter(root, f"ipc://{short_dir}/nobody.ctl")
    assert call(reporter, ops.CHECK) == {"daemon": {"configured": True, "reachable": False, "error": "unavailable"}}
    sender = subprocess.run(
        [sys.executable, "-c", "from shared import hooks; import time; hooks.report_activity('idle'); time.sleep(3)"],
        cwd=ROOT,
        env=managed_env(root),
        timeout=30,
    )
    assert sender.returncode == 0
    wait_for(lambda: call(reporter, ops.STATUS)["dropped"].get("daemon_unreachable") == 1, timeout=20, what="the drop")


def doctor(root, **env):
    done = hermes("operator", "doctor", "--json", env=managed_env(root, **env))
    report = json.loads(done.stdout)
    return done.returncode, {f["check"]: f["code"] for f in report["findings"]}


def test_operator_doctor_finds_the_daemon_the_reporter_forwards_to(root, daemon, short_dir):
    # Its other findings are the reporter's answers alone: tests/service/test_operator_doctor.py.
    start_reporter(root, daemon)
    assert doctor(root) == (
        0,
        {
            "session": "managed",
            "identity": "readable",
            "dry_run": "report_valid",
            "reporter": "reporter_reachable",
            "daemon": "daemon_reachable",
        },
    )
