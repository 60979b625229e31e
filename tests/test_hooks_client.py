"""The hook client over real ipc sockets: the frames it sends, the reports it refuses, and
that it returns without raising whether or not a reporter is there to take them.

Absence is shown without sleeping: after the calls that must send nothing, a valid report
is sent, and it must be the first frame the intake receives.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import zmq

from shared import homes
from shared.hook_vocabulary import MAX_CONTINUATION_IDS
from shared.hooks import HookClient, intake_address
from shared.identity import current_identity, process_identity
from shared.protocol import unpack
from tests.support.processes import ROOT, python_env

pytestmark = pytest.mark.root(run_dir=True)

SESSION = "pohunek:s-1.a_b"
MANAGED = {"POHUNEK_SESSION_ID": SESSION}


@pytest.fixture
def intake(root):
    """The documented intake address of ``root``."""
    return f"ipc://{root}/run/hook_reporter.in"


@pytest.fixture
def bind():
    """Bind PULL sockets (a reporter that reads only when the test does); closed at the end."""
    context = zmq.Context()
    sockets: list[zmq.Socket] = []

    def bound(address: str) -> zmq.Socket:
        sock = context.socket(zmq.PULL)
        sock.bind(address)
        sockets.append(sock)
        return sock

    yield bound
    for sock in sockets:
        sock.close(linger=0)
    context.term()


@pytest.fixture
def make():
    """Build HookClients; each is closed at the end, as the process's own is at exit."""
    clients: list[HookClient] = []

    def build(env: dict[str, str], root=None) -> HookClient:
        clients.append(HookClient(env, root))
        return clients[-1]

    yield build
    for client in clients:
        client.close()


def receive(pull: zmq.Socket) -> dict:
    assert pull.poll(10_000), "no report arrived"
    return unpack(pull.recv())


def first_received_is_the_sentinel(pull: zmq.Socket, root) -> bool:
    """Whether a fresh report from another client is the first frame ``pull`` gets."""
    sentinel = HookClient(MANAGED, root)
    assert sentinel.report_native_id("sentinel")
    sentinel.close()
    return receive(pull)["native_id"] == "sentinel"


def counts(**nonzero: int) -> dict[str, int]:
    return {"sent": 0, "unmanaged": 0, "refused": 0, "not_accepted": 0, "error": 0, **nonzero}


# --- managed or not -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"POHUNEK_SESSION_ID": ""},
        {"POHUNEK_SESSION_ID": "has space"},
        {"POHUNEK_SESSION_ID": "a/b"},
        {"POHUNEK_SESSION_ID": "trailing\n"},
        {"POHUNEK_SESSION_ID": "x" * 129},
    ],
)
def test_outside_a_managed_session_nothing_is_sent(make, env, root, intake, bind):
    pull = bind(intake)
    client = make(env, root)
    assert client.report_native_id("abc") is False
    assert client.report_continuation(["abc"]) is False
    assert client.report_activity("working") is False
    assert client.report_attention() is False
    assert client.report_release("session_end") is False
    assert client.counters() == counts(unmanaged=5)
    assert first_received_is_the_sentinel(pull, root)


# --- the frames -----------------------------------------------------------------------------

LAUNCH_ENV = {
    "POHUNEK_LAUNCH_EXE": "/opt/python/bin/python3.11",
    "POHUNEK_LAUNCH_SCRIPT": "/opt/hermes/bin/hermes",
    "POHUNEK_PTY_ROOT_PID": "4242",
}
LAUNCH = {"exe": "/opt/python/bin/python3.11", "script": "/opt/hermes/bin/hermes", "root_pid": 4242}


@pytest.mark.parametrize(
    ("call", "kind", "fields"),
    [
        (
            lambda c: c.report_native_id("20260101_abc-1"),
            "native_id",
            {"native_id": "20260101_abc-1", "resumed": False, "launch": LAUNCH},
        ),
        (
            lambda c: c.report_native_id("x" * 128, resumed=True),
            "native_id",
            {"native_id": "x" * 128, "resumed": True, "launch": LAUNCH},
        ),
        (lambda c: c.report_continuation(("a1", "b.2:3")), "continuation", {"continuation_ids": ["a1", "b.2:3"]}),
        (
            lambda c: c.report_continuation([f"c{i}" for i in range(MAX_CONTINUATION_IDS)]),
            "continuation",
            {"continuation_ids": [f"c{i}" for i in range(MAX_CONTINUATION_IDS)]},
        ),
        (lambda c: c.report_activity("working"), "activity", {"state": "working"}),
        (lambda c: c.report_activity("idle"), "activity", {"state": "idle"}),
        (lambda c: c.report_attention(), "attention", {"reason": "owner_approval"}),
        (lambda c: c.report_release("session_end"), "release", {"reason": "session_end"}),
        (lambda c: c.report_release("agent_exit"), "release", {"reason": "agent_exit"}),
        (lambda c: c.report_release("handoff"), "release", {"reason": "handoff"}),
    ],
)
def test_each_kind_sends_exactly_the_documented_frame(make, call, kind, fields, root, intake, bind):
    pull = bind(intake)
    client = make({**MANAGED, **LAUNCH_ENV}, root)
    before = time.time()
    assert call(client) is True
    after = time.time()
    frame = receive(pull)
    assert type(frame["at"]) is float and before <= frame["at"] <= after
    assert frame == {
        "v": 1,
        "kind": kind,
        "session": SESSION,
        "pid": os.getpid(),
        "start_time": current_identity().start_time,
        "at": frame["at"],
        **fields,
    }
    assert client.counters() == counts(sent=1)


@pytest.mark.parametrize(
    ("launch_env", "launch"),
    [
        ({}, {"exe": None, "script": None, "root_pid": None}),
        ({"POHUNEK_LAUNCH_EXE": "", "POHUNEK_PTY_ROOT_PID": "-3"}, {"exe": None, "script": None, "root_pid": None}),
        ({"POHUNEK_PTY_ROOT_PID": "12x"}, {"exe": None, "script": None, "root_pid": None}),
        ({"POHUNEK_PTY_ROOT_PID": "0"}, {"exe": None, "script": None, "root_pid": None}),
    ],
)
def test_a_missing_or_unreadable_launch_claim_is_carried_as_none(make, launch_env, launch, root, intake, bind):
    pull = bind(intake)
    assert make({**MANAGED, **launch_env}, root).report_native_id("abc") is True
    assert receive(pull)["launch"] == launch


# --- payload refusal ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.report_native_id("summarise my tax return"),
        lambda c: c.report_native_id("/home/me/.ssh/id_rsa"),
        lambda c: c.report_native_id("rm -rf /"),
        lambda c: c.report_native_id("abc\n"),
        lambda c: c.report_native_id("line\nbreak"),
        lambda c: c.report_native_id("x" * 129),
        lambda c: c.report_native_id(""),
        lambda c: c.report_native_id("naïve"),
        lambda c: c.report_native_id(42),
        lambda c: c.report_native_id(None),
        lambda c: c.report_native_id(b"abc"),
        lambda c: c.report_native_id("abc", resumed="yes"),
        lambda c: c.report_native_id("abc", resumed=1),
        lambda c: c.report_continuation([]),
        lambda c: c.report_continuation(["a"] * (MAX_CONTINUATION_IDS + 1)),
        lambda c: c.report_continuation("abc"),  # a str, not three ids
        lambda c: c.report_continuation(["ok", "not ok"]),
        lambda c: c.report_continuation(["ok", 7]),
        lambda c: c.report_continuation(None),
        lambda c: c.report_continuation({"a", "b"}),
        lambda c: c.report_activity("busy"),
        lambda c: c.report_activity("Working"),
        lambda c: c.report_activity(None),
        lambda c: c.report_attention("please approve: rm -rf /"),
        lambda c: c.report_release("crash"),
        lambda c: c.report_release(""),
    ],
)
def test_a_report_that_could_carry_a_payload_is_refused(make, call, root, intake, bind):
    pull = bind(intake)
    client = make(MANAGED, root)
    assert call(client) is False
    assert client.counters() == counts(refused=1)
    assert first_received_is_the_sentinel(pull, root)


def test_a_frame_over_one_kib_is_refused(make, root, intake, bind):
    pull = bind(intake)
    client = make({**MANAGED, "POHUNEK_LAUNCH_SCRIPT": "/x" * 600}, root)
    assert client.report_native_id("abc") is False
    assert client.report_activity("idle") is True  # the launch claim rides on native_id only
    assert client.counters() == counts(refused=1, sent=1)
    assert receive(pull)["kind"] == "activity"


# --- no reporter, or one not keeping up -----------------------------------------------------


def test_with_no_reporter_a_report_is_not_accepted_and_nothing_raises(make, root):
    client = make(MANAGED, root)
    results = [client.report_activity("working") for _ in range(100)]
    results.append(client.report_native_id("abc"))
    assert results == [False] * 101
    assert client.counters() == counts(not_accepted=101)


def test_a_reporter_that_never_reads_makes_reports_not_accepted(make, root, intake, bind):
    bind(intake)  # bound, never read
    client = make(MANAGED, root)
    results = [client.report_activity("working") for _ in range(5000)]
    assert all(type(r) is bool for r in results)
    sent, dropped = results.count(True), results.count(False)
    assert sent > 0 and dropped > 0
    assert client.counters() == counts(sent=sent, not_accepted=dropped)


def test_a_reporter_that_starts_late_gets_the_reports_sent_after(make, root, intake, bind):
    client = make(MANAGED, root)
    assert client.report_activity("working") is False
    pull = bind(intake)
    # The socket reconnects on its own; until it has, reports are not accepted.
    deadline = time.monotonic() + 10
    while not client.report_native_id("late"):
        assert time.monotonic() < deadline, "the client never reconnected"
        time.sleep(0.01)
    assert receive(pull)["native_id"] == "late"


# --- where the reports go -------------------------------------------------------------------


def test_the_intake_is_beside_the_reporters_control_socket(root, intake):
    assert intake_address(root) == intake
    assert homes.endpoint(root, "hook_reporter", create=False).control == intake.removesuffix(".in") + ".ctl"


def test_the_endpoint_override_is_used(make, root, short_dir, bind):
    override = f"ipc://{short_dir}/elsewhere.in"
    pull = bind(override)
    assert make({**MANAGED, "POHUNEK_HOOK_ENDPOINT": override}, root).report_native_id("abc") is True
    assert receive(pull)["native_id"] == "abc"


@pytest.mark.parametrize("override", ["tcp://127.0.0.1:5555", "ipc://", "/tmp/x.in", ""])
def test_an_override_that_is_not_ipc_is_ignored(make, override, root, intake, bind):
    pull = bind(intake)
    assert make({**MANAGED, "POHUNEK_HOOK_ENDPOINT": override}, root).report_native_id("abc") is True
    assert receive(pull)["native_id"] == "abc"


def test_the_root_defaults_to_the_one_the_environment_names(make, root, intake, bind):
    pull = bind(intake)
    client = make({**MANAGED, "HERMES_HOME": str(root / "profiles" / "coder")})
    assert client.report_activity("idle") is True
    assert receive(pull)["state"] == "idle"


# --- processes ------------------------------------------------------------------------------


def test_a_forked_child_reports_through_its_own_socket(make, root, intake, bind):
    pull = bind(intake)
    client = make(MANAGED, root)
    assert client.report_activity("working") is True
    assert receive(pull)["pid"] == os.getpid()

    child = os.fork()
    if child == 0:  # the child: never return into pytest
        code = 1
        try:
            sent = client.report_activity("idle")
            client.close()  # let the report leave before _exit
            code = 0 if sent else 2
        finally:
            os._exit(code)
    frame = receive(pull)  # the parent's socket in the child would deliver nothing
    child_identity = process_identity(child)  # unreaped, so still readable
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert (frame["pid"], frame["start_time"]) == (child, child_identity.start_time)
    assert frame["state"] == "idle"
    # The parent's own socket is untouched by the child.
    assert client.report_activity("working") is True
    assert receive(pull)["pid"] == os.getpid()


def _run_hooks(program: str, env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, "-c", f"from shared import hooks\n{program}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_module_functions_report_from_os_environ(root, intake, bind):
    pull = bind(intake)
    program = "print(hooks.report_native_id('abc'), hooks.report_activity('busy'), hooks.counters())"
    env = python_env(HERMES_HOME=str(root), POHUNEK_SESSION_ID=SESSION)
    env.pop("POHUNEK_HOOK_ENDPOINT", None)
    out = _run_hooks(program, env)
    assert out == "True False " + str(counts(sent=1, refused=1))
    frame = receive(pull)
    assert (frame["kind"], frame["native_id"], frame["session"]) == ("native_id", "abc", SESSION)


def test_the_module_functions_report_nothing_outside_a_managed_session(root, intake, bind):
    pull = bind(intake)
    env = python_env(HERMES_HOME=str(root))
    env.pop("POHUNEK_SESSION_ID", None)
    out = _run_hooks("print(hooks.report_activity('working'), hooks.counters())", env)
    assert out == "False " + str(counts(unmanaged=1))
    assert first_received_is_the_sentinel(pull, root)


def test_counters_are_a_copy(make, root):
    client = make({}, root)
    client.counters()["sent"] = 99
    assert client.counters() == counts()
