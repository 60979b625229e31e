"""The plugin's hooks in real Hermes-like processes, under an audit hook: with a real reporter
forwarding to the session daemon simulator, with a reporter nobody runs and with a socket that
cannot be made, and outside a managed session. They never start a process, use the network or
open anything in the Hermes home, never let an exception out, and never copy a payload."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys

import pytest

from shared.hooks import ENDPOINT_ENV, SESSION_ENV, intake_address
from simulators.operator_sim.ops import SIM_RECORDS
from tests.support.hook_reports import counts, first_received_is_the_sentinel
from tests.support.plugin_hooks_run import SECRET, STANDALONE_ENV
from tests.support.processes import ROOT, python_env, wait_for
from tests.support.session_daemon import SessionDaemon, start_reporter

SCRIPT = ROOT / "tests" / "support" / "plugin_hooks_run.py"
SESSION = "sess-1"
CALLS = 11  # the hook calls the script makes
REPORTS = 10  # the reports those calls send in a managed session
EXPECTED = [
    ("native_id", "conv_a"),
    ("activity", "working"),
    ("attention", "owner_approval"),
    ("activity", "working"),
    ("activity", "idle"),
    ("continuation", ["conv_b"]),
    ("activity", "working"),
    ("activity", "working"),  # an id that is not one: only the activity
    ("activity", "idle"),
    ("release", "session_end"),
]
VALUE = {
    "native_id": "native_id",
    "activity": "state",
    "attention": "reason",
    "continuation": "continuation_ids",
    "release": "reason",
}


class HookRun:
    """The script's process: its one JSON line, then alive until ``finish``."""

    def __init__(self, env: dict[str, str]):
        launch = {"POHUNEK_LAUNCH_EXE": os.path.realpath(sys.executable), "POHUNEK_LAUNCH_SCRIPT": str(SCRIPT)}
        # As the launcher starts Hermes: the PTY root exec's the entrypoint, so $$ is its own pid.
        self.proc = subprocess.Popen(
            ["sh", "-c", 'export POHUNEK_PTY_ROOT_PID=$$; exec "$0" "$1"', sys.executable, str(SCRIPT)],
            cwd=ROOT,
            env={**env, **launch},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.finish()
            raise AssertionError(f"the hook script printed nothing: {self.proc.stderr.read()}")
        self.result = json.loads(line)

    def finish(self) -> int:
        self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


@pytest.fixture
def run_hooks():
    runs: list[HookRun] = []

    def run(env: dict[str, str]) -> HookRun:
        runs.append(HookRun(env))
        return runs[-1]

    yield run
    for started in runs:
        started.finish()


def managed(root, endpoint: str) -> dict[str, str]:
    return python_env(HERMES_HOME=str(root), **{SESSION_ENV: SESSION, ENDPOINT_ENV: endpoint})


def signature(record: dict) -> tuple:
    return record["kind"], record[VALUE[record["kind"]]]


@pytest.mark.parametrize(("standalone", "sender"), [(False, "hooks"), (True, "hook_wire")])
def test_with_a_reporter_every_hook_reports_and_nothing_else_happens(root, short_dir, run_hooks, standalone, sender):
    """In process over zmq, and without this project's packages over the plugin's own sender:
    the same reports reach the daemon."""
    daemon = SessionDaemon(short_dir)
    try:
        start_reporter(root, daemon.address)
        env = managed(root, intake_address(root))
        run = run_hooks({**env, STANDALONE_ENV: "1"} if standalone else env)
        result = run.result
        assert result["sender"] == sender
        assert result["forbidden"] == [] and result["escaped"] == []
        assert result["touched"] == 0  # no payload value was even looked at
        assert result["hooks"] == {"calls": CALLS, "failures": 0}
        assert result["reports"]["sent"] == REPORTS
        records = wait_for(
            lambda: (got := daemon.call(SIM_RECORDS)["records"]) and len(got) >= REPORTS and got,
            timeout=30,
            what="the reports at the daemon",
        )
        assert [signature(r) for r in records] == EXPECTED
        assert {(r["session"], r["pid"]) for r in records} == {(SESSION, run.proc.pid)}
        assert all(SECRET not in json.dumps(r) for r in records)
        assert run.finish() == 0
    finally:
        daemon.stop()


@pytest.mark.parametrize(
    ("where", "outcome"),
    [
        ("nobody", "not_accepted"),  # an intake nobody listens on
        ("too_long", "error"),  # a socket path zmq cannot connect to: the socket itself fails
    ],
)
def test_with_no_reporter_every_failure_is_swallowed_and_counted(root, short_dir, run_hooks, where, outcome):
    endpoint = {"nobody": f"ipc://{short_dir}/nobody.in", "too_long": f"ipc://{short_dir}/{'x' * 300}"}[where]
    run = run_hooks(managed(root, endpoint))
    result = run.result
    assert result["forbidden"] == [] and result["escaped"] == [] and result["touched"] == 0
    assert result["hooks"] == {"calls": CALLS, "failures": REPORTS}
    assert result["reports"]["sent"] == 0 and result["reports"][outcome] >= REPORTS
    assert run.finish() == 0


def test_an_endpoint_that_is_not_ipc_falls_back_to_the_homes_intake_with_no_network(root, run_hooks):
    run = run_hooks(managed(root, "tcp://10.0.0.1:9"))
    result = run.result
    # Finding the home's intake reads its config (for a tcp mesh address), never a database.
    assert set(result["forbidden"]) <= {f"open {root}/config.yaml"}
    assert result["escaped"] == [] and result["hooks"] == {"calls": CALLS, "failures": REPORTS}
    assert result["reports"]["sent"] == 0
    assert run.finish() == 0


@pytest.mark.root(run_dir=True)
def test_outside_a_managed_session_nothing_is_sent(root, intake, bind_pull, run_hooks):
    pull = bind_pull(intake)
    env = python_env(HERMES_HOME=str(root), **{ENDPOINT_ENV: intake})
    env.pop(SESSION_ENV, None)
    run = run_hooks(env)
    result = run.result
    assert result["forbidden"] == [] and result["escaped"] == [] and result["touched"] == 0
    assert result["hooks"] == {"calls": CALLS, "failures": 0}
    assert result["reports"] == counts(unmanaged=REPORTS)
    assert run.finish() == 0
    assert first_received_is_the_sentinel(pull, root)


CANARY = """
import json, os, socket, sqlite3, subprocess, sys
from tests.support.plugin_hooks_run import watch
home = sys.argv[1]
seen = watch(home)
open(os.path.join(home, "state.db"), "w").close()
sqlite3.connect(":memory:").close()
subprocess.run(["true"], check=True)
try:
    socket.create_connection(("127.0.0.1", 9), timeout=1).close()
except OSError:
    pass
print(json.dumps(seen))
"""


def test_the_audit_hook_sees_each_thing_the_hooks_must_never_do(root):
    done = subprocess.run(
        [sys.executable, "-c", CANARY, str(root)],
        cwd=ROOT,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    seen = set(json.loads(done.stdout))
    expected = {f"open {root}/state.db", "sqlite3.connect", "subprocess.Popen", "socket.getaddrinfo"}
    assert expected | {"socket.__new__", "socket.connect"} <= seen
