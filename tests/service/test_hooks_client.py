"""The hook client over real ipc sockets: the frames it sends, the reports it refuses, and
that it returns without raising whether or not a reporter is there to take them.

Absence is shown without sleeping: after the calls that must send nothing, a valid report
is sent, and it must be the first frame the intake receives."""

from __future__ import annotations

import os
import time

import pytest

from shared.hook_vocabulary import MAX_CONTINUATION_IDS
from shared.identity import current_identity
from tests.support.hook_reports import (
    CONNECT_WAIT_MS,
    MANAGED,
    SESSION,
    connected,
    counts,
    first_received_is_the_sentinel,
    receive,
)

pytestmark = pytest.mark.root(run_dir=True)


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
def test_outside_a_managed_session_nothing_is_sent(hook_client, env, root, intake, bind_pull):
    pull = bind_pull(intake)
    client = hook_client(env, root)
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
def test_each_kind_sends_exactly_the_documented_frame(hook_client, call, kind, fields, root, intake, bind_pull):
    pull = bind_pull(intake)
    client = connected(hook_client({**MANAGED, **LAUNCH_ENV}, root))
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
def test_a_missing_or_unreadable_launch_claim_is_carried_as_none(
    hook_client, launch_env, launch, root, intake, bind_pull
):
    pull = bind_pull(intake)
    assert connected(hook_client({**MANAGED, **launch_env}, root)).report_native_id("abc") is True
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
def test_a_report_that_could_carry_a_payload_is_refused(hook_client, call, root, intake, bind_pull):
    pull = bind_pull(intake)
    client = hook_client(MANAGED, root)
    assert call(client) is False
    assert client.counters() == counts(refused=1)
    assert first_received_is_the_sentinel(pull, root)


def test_a_frame_over_one_kib_is_refused(hook_client, root, intake, bind_pull):
    pull = bind_pull(intake)
    client = connected(hook_client({**MANAGED, "POHUNEK_LAUNCH_SCRIPT": "/x" * 600}, root))
    assert client.report_native_id("abc") is False
    assert client.report_activity("idle") is True  # the launch claim rides on native_id only
    assert client.counters() == counts(refused=1, sent=1)
    assert receive(pull)["kind"] == "activity"


# --- no reporter, or one not keeping up -----------------------------------------------------


def test_with_no_reporter_a_report_is_not_accepted_and_nothing_raises(hook_client, root):
    client = hook_client(MANAGED, root)
    results = [client.report_activity("working") for _ in range(100)]
    results.append(client.report_native_id("abc"))
    assert results == [False] * 101
    assert client.counters() == counts(not_accepted=101)


def test_a_reporter_that_never_reads_makes_reports_not_accepted(hook_client, root, intake, bind_pull):
    bind_pull(intake)  # bound, never read
    client = hook_client(MANAGED, root)
    results = [client.report_activity("working") for _ in range(5000)]
    assert all(type(r) is bool for r in results)
    sent, dropped = results.count(True), results.count(False)
    assert sent > 0 and dropped > 0
    assert client.counters() == counts(sent=sent, not_accepted=dropped)


@pytest.mark.parametrize("env", [MANAGED, {}], ids=["managed", "unmanaged"])
def test_preparing_the_socket_sends_and_counts_nothing(hook_client, env, root, intake, bind_pull):
    pull = bind_pull(intake)
    client = hook_client(env, root)
    assert client.prepare(CONNECT_WAIT_MS) is (env == MANAGED)
    assert client.prepare() is (env == MANAGED)  # a second one finds the socket made
    assert client.counters() == counts()
    assert first_received_is_the_sentinel(pull, root)


def test_a_reporter_that_starts_late_gets_the_reports_sent_after(hook_client, root, intake, bind_pull):
    client = hook_client(MANAGED, root)
    assert client.report_activity("working") is False
    pull = bind_pull(intake)
    # The socket reconnects on its own; until it has, reports are not accepted.
    deadline = time.monotonic() + 10
    while not client.report_native_id("late"):
        assert time.monotonic() < deadline, "the client never reconnected"
        time.sleep(0.01)
    assert receive(pull)["native_id"] == "late"


def test_the_endpoint_override_is_used(hook_client, root, short_dir, bind_pull):
    override = f"ipc://{short_dir}/elsewhere.in"
    pull = bind_pull(override)
    assert connected(hook_client({**MANAGED, "POHUNEK_HOOK_ENDPOINT": override}, root)).report_native_id("abc") is True
    assert receive(pull)["native_id"] == "abc"


@pytest.mark.parametrize("override", ["tcp://127.0.0.1:5555", "ipc://", "/tmp/x.in", ""])
def test_an_override_that_is_not_ipc_is_ignored(hook_client, override, root, intake, bind_pull):
    pull = bind_pull(intake)
    assert connected(hook_client({**MANAGED, "POHUNEK_HOOK_ENDPOINT": override}, root)).report_native_id("abc") is True
    assert receive(pull)["native_id"] == "abc"


def test_the_root_defaults_to_the_one_the_environment_names(hook_client, root, intake, bind_pull):
    pull = bind_pull(intake)
    client = connected(hook_client({**MANAGED, "HERMES_HOME": str(root / "profiles" / "coder")}))
    assert client.report_activity("idle") is True
    assert receive(pull)["state"] == "idle"
