"""The operator daemon protocol's pure rules: the v3 bridge, the origin guard, the client's
retry rule, name resolution and a session's record."""

from __future__ import annotations

import pytest

from shared.operator import protocol as p
from shared.operator.client import ONE_RETRY, call_rule
from shared.protocol import RemoteError
from shared.transport.call_rules import NO_RETRY
from simulators.operator_sim import bridge
from simulators.operator_sim.registry import Registry, guard
from simulators.operator_sim.sessions import Clock, Session

DAEMON = "d-1"


def session(sid="s-1", name=None, host="local"):
    return Session(sid, host, "hermes", "hermes", "/w", "t0", "t0", 80, 24, False, name=name)


def test_v3_may_say_runtime_id_and_v4_may_not():
    assert bridge.arguments(3, {"runtime_id": "wi-1"}) == {"worker_instance_id": "wi-1"}
    assert bridge.arguments(3, {"runtime_id": "wi-1", "worker_instance_id": "wi-1"}) == {"worker_instance_id": "wi-1"}
    with pytest.raises(RemoteError) as conflict:
        bridge.arguments(3, {"runtime_id": "wi-1", "worker_instance_id": "wi-2"})
    assert conflict.value.code == "invalid_field"
    with pytest.raises(RemoteError) as v4:
        bridge.arguments(4, {"runtime_id": "wi-1"})
    assert (v4.value.code, v4.value.detail) == ("unknown_field", {"field": "runtime_id"})
    assert bridge.arguments(4, {"worker_instance_id": "wi-1"}) == {"worker_instance_id": "wi-1"}


def test_v3_summaries_carry_both_spellings_and_v4_one():
    live = session()
    live.launched(42, "t1")
    summary = live.summary()
    v3 = bridge.summary(3, summary)
    assert (
        v3["runtime"]["runtime_id"] == v3["runtime"]["worker_instance_id"] == summary["runtime"]["worker_instance_id"]
    )
    assert "runtime_id" not in bridge.summary(4, summary)["runtime"]
    assert "runtime_id" not in summary["runtime"]  # the bridge copies, never edits
    assert bridge.summary(3, session().summary())["runtime"] == {"state": "none", "runtime_generation": "0"}


@pytest.mark.parametrize("method", sorted(p.ORIGIN_DENIED | p.ORIGIN_DAEMON_ONLY))
def test_the_guard_refuses_each_self_targeting_method(method):
    with pytest.raises(RemoteError) as denied:
        guard(method, session(), {"origin_session_id": "s-1", "origin_daemon_id": DAEMON}, DAEMON)
    assert (denied.value.code, denied.value.detail) == (
        p.Code.SELF_TARGET_DENIED,
        {"method": method, "session_id": "s-1"},
    )


@pytest.mark.parametrize(
    "method, origin",
    [
        *((m, {"origin_session_id": "s-1", "origin_daemon_id": DAEMON}) for m in sorted(p.ORIGIN_LIFECYCLE)),
        ("output", {"origin_session_id": "s-1", "origin_daemon_id": DAEMON}),
        ("stop", {"origin_session_id": "s-1", "origin_daemon_id": "d-other"}),  # another daemon's session
        ("stop", {"origin_session_id": "s-2", "origin_daemon_id": DAEMON}),
        ("stop", {"origin_session_id": "s-1"}),  # half an origin is none
        ("stop", {}),
    ],
)
def test_the_guard_allows_reads_lifecycle_reports_and_other_targets(method, origin):
    assert guard(method, session(), origin, DAEMON) is None  # allowed: nothing raised


def test_there_are_exactly_eight_denied_methods_beside_the_consent_removal():
    assert len(p.ORIGIN_DENIED) == 8 and p.ORIGIN_DAEMON_ONLY == {"remove_accepting_unconfirmed"}
    assert not p.ORIGIN_LIFECYCLE & (p.ORIGIN_DENIED | p.ORIGIN_DAEMON_ONLY)
    assert {p.method(name) for name in p.MUTATIONS} == p.ORIGIN_DENIED | p.ORIGIN_DAEMON_ONLY


def test_a_mutation_is_retried_once_and_only_with_a_key():
    spec, retry = call_rule(p.SESSION_STOP, {"idempotency_key": "k"})
    assert spec.idempotent and retry is ONE_RETRY
    assert call_rule(p.SESSION_STOP, {}) == (p.SESSION_STOP, NO_RETRY)
    assert call_rule(p.SESSION_NEW, {"idempotency_key": "k"}) == (p.SESSION_NEW, NO_RETRY)  # the one permitted start
    assert call_rule(p.REPORT, {})[1] is NO_RETRY
    assert call_rule(p.SESSION_OUTPUT, {})[1].retries > 0


def test_names_resolve_to_exactly_one_session():
    registry = Registry(["local", "desktop"])
    for sid, name in (("s-1", "a"), ("s-2", "b"), ("s-3", "b")):
        registry.add(session(sid, name))
    assert registry.find("local", "s-2").id == "s-2"
    assert registry.find("local", "a").id == "s-1"
    with pytest.raises(RemoteError) as ambiguous:
        registry.find("local", "b")
    assert (ambiguous.value.code, ambiguous.value.detail["ids"]) == (p.Code.SESSION_AMBIGUOUS, ["s-2", "s-3"])
    with pytest.raises(RemoteError) as missing:
        registry.find("desktop", "a")
    assert missing.value.code == p.Code.SESSION_NOT_FOUND
    with pytest.raises(RemoteError) as unknown:
        registry.find("buildbox", "a")
    assert unknown.value.code == p.Code.HOST_UNKNOWN
    registry.down.add("desktop")
    with pytest.raises(RemoteError) as down:
        registry.sessions("desktop")
    assert down.value.code == p.Code.HOST_UNREACHABLE


def test_stamps_strictly_increase_and_compare_as_text():
    clock = Clock()
    stamps = [clock.stamp(1_700_000_000_000_000_000) for _ in range(3)] + [clock.stamp(1_600_000_000_000_000_000)]
    assert stamps == sorted(stamps) and len(set(stamps)) == 4
    assert stamps[0] == "2023-11-14T22:13:20.000000000Z" and stamps[1].endswith(".000000001Z")


def test_a_runtime_changes_generation_on_each_launch_and_ends_by_how_it_exited():
    record = session()
    assert (record.state, record.runtime.state, record.runtime.generation) == ("starting", "none", 0)
    record.launched(10, "t1")
    first = record.runtime.worker_instance_id
    assert (record.state, record.live, record.runtime.generation) == ("running", True, 1)
    record.native_session_id = "n-1"
    record.exited(0, stopped=True, at="t2")
    assert (record.state, record.resumable) == ("stopped", True)
    record.launched(11, "t3")
    assert record.runtime.generation == 2 and record.runtime.worker_instance_id != first
    record.exited(3, stopped=False, at="t4")
    assert (record.state, record.exit_code, record.resumable) == ("failed", 3, False)
    record.launched(12, "t5")
    record.exited(-9, stopped=False, at="t6")
    assert (record.state, record.exit_code) == ("failed", None)
    record.launched(13, "t7")
    record.lost("daemon_restarted", "t8")
    assert (record.runtime.state, record.runtime.loss_reason, record.resumable) == ("lost", "daemon_restarted", True)
    assert Session.from_state(record.to_state()) == record
