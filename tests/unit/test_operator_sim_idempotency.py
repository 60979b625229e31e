"""Idempotency keys: one effect per key, the same answer for a retry, a bounded table."""

from __future__ import annotations

import pytest

from shared.protocol import RemoteError
from simulators.operator_sim.idempotency import Idempotency, args_digest

OP = "session.input"
ARGS = {"host": "local", "session": "s-1", "text": "hello", "submit": True, "idempotency_key": "k-1"}
DIGEST = args_digest(ARGS)
RESULT = {"session_id": "s-1", "accepted_bytes": 6}


def code_of(call) -> str:
    with pytest.raises(RemoteError) as caught:
        call()
    return caught.value.code


def test_a_new_key_runs_and_a_retry_gets_the_stored_result():
    table = Idempotency()
    assert table.begin(OP, "k-1", DIGEST, now=0.0) is None
    table.finish(OP, "k-1", RESULT, now=1.0)
    assert table.begin(OP, "k-1", DIGEST, now=2.0) == RESULT
    assert table.begin(OP, "k-1", DIGEST, now=3.0) == RESULT  # and again


def test_the_same_key_with_other_arguments_is_a_conflict():
    table = Idempotency()
    table.begin(OP, "k-1", DIGEST, now=0.0)
    other = args_digest({**ARGS, "text": "goodbye"})
    with pytest.raises(RemoteError) as caught:
        table.begin(OP, "k-1", other, now=0.5)
    assert (caught.value.code, caught.value.detail) == ("idempotency_conflict", {"idempotency_key": "k-1"})
    table.finish(OP, "k-1", RESULT, now=1.0)
    assert code_of(lambda: table.begin(OP, "k-1", other, now=2.0)) == "idempotency_conflict"


def test_a_retry_while_the_first_call_runs_is_refused():
    table = Idempotency()
    table.begin(OP, "k-1", DIGEST, now=0.0)
    assert code_of(lambda: table.begin(OP, "k-1", DIGEST, now=1.0)) == "idempotency_in_flight"


def test_keys_are_per_op():
    table = Idempotency()
    table.begin(OP, "k-1", DIGEST, now=0.0)
    assert table.begin("session.stop", "k-1", "another digest", now=0.0) is None


def test_an_abandoned_key_may_be_used_again_even_with_other_arguments():
    table = Idempotency()
    table.begin(OP, "k-1", DIGEST, now=0.0)
    table.abandon(OP, "k-1")
    assert table.begin(OP, "k-1", "another digest", now=1.0) is None


def test_a_stored_result_expires_after_the_ttl():
    table = Idempotency(ttl=10.0)
    table.begin(OP, "k-1", DIGEST, now=0.0)
    table.finish(OP, "k-1", RESULT, now=100.0)  # the ttl counts from the finish
    assert table.begin(OP, "k-1", DIGEST, now=109.9) == RESULT
    assert table.begin(OP, "k-1", "another digest", now=110.0) is None  # a new call now


def test_an_in_flight_key_never_expires():
    table = Idempotency(ttl=10.0)
    table.begin(OP, "k-1", DIGEST, now=0.0)
    assert code_of(lambda: table.begin(OP, "k-1", DIGEST, now=1000.0)) == "idempotency_in_flight"


def test_the_table_is_bounded_and_drops_the_least_recently_used_result():
    table = Idempotency(max_keys=3)
    for key in ("a", "b", "c"):
        table.begin(OP, key, DIGEST, now=0.0)
        table.finish(OP, key, {"key": key}, now=0.0)
    assert table.begin(OP, "a", DIGEST, now=1.0) == {"key": "a"}  # "a" is now the most recent
    assert table.begin(OP, "d", DIGEST, now=1.0) is None
    assert len(table) == 3
    assert table.begin(OP, "b", DIGEST, now=1.0) is None  # "b" was dropped: a new call
    assert table.begin(OP, "a", DIGEST, now=1.0) == {"key": "a"}


def test_expired_results_are_dropped_before_live_ones():
    table = Idempotency(max_keys=2, ttl=10.0)
    table.begin(OP, "old", DIGEST, now=0.0)
    table.finish(OP, "old", {"key": "old"}, now=0.0)
    table.begin(OP, "live", DIGEST, now=5.0)
    table.finish(OP, "live", {"key": "live"}, now=5.0)
    table.begin(OP, "old", DIGEST, now=6.0)  # a replay makes "old" the most recently used
    table.begin(OP, "new", DIGEST, now=12.0)  # "old" expired at 10: it goes, not "live"
    assert table.begin(OP, "live", DIGEST, now=12.0) == {"key": "live"}


def test_in_flight_keys_are_never_evicted_and_a_full_table_refuses():
    table = Idempotency(max_keys=2)
    table.begin(OP, "a", DIGEST, now=0.0)
    table.begin(OP, "b", DIGEST, now=0.0)
    with pytest.raises(RemoteError) as caught:
        table.begin(OP, "c", DIGEST, now=0.0)
    assert (caught.value.code, caught.value.detail) == ("idempotency_table_full", {"limit": 2})
    assert code_of(lambda: table.begin(OP, "a", DIGEST, now=0.0)) == "idempotency_in_flight"
    table.finish(OP, "a", RESULT, now=0.0)
    assert table.begin(OP, "c", DIGEST, now=0.0) is None  # the finished "a" made room
    assert code_of(lambda: table.begin(OP, "b", DIGEST, now=0.0)) == "idempotency_in_flight"


@pytest.mark.parametrize("key", ["", "a" * 129, "has space", "ключ", "a/b", "k\n", None, 7])
def test_a_malformed_key_is_refused(key):
    with pytest.raises(RemoteError) as caught:
        Idempotency().begin(OP, key, DIGEST, now=0.0)
    assert (caught.value.code, caught.value.detail) == ("invalid_field", {"field": "idempotency_key"})


@pytest.mark.parametrize("key", ["a", "a" * 128, "plugin:7f3a.retry-1_x", "-leading-dash"])
def test_well_formed_keys_are_accepted(key):
    assert Idempotency().begin(OP, key, DIGEST, now=0.0) is None


def test_finishing_or_abandoning_a_key_not_in_flight_is_a_bug():
    table = Idempotency()
    with pytest.raises(ValueError):
        table.finish(OP, "k-1", RESULT, now=0.0)
    with pytest.raises(ValueError):
        table.abandon(OP, "k-1")
    table.begin(OP, "k-1", DIGEST, now=0.0)
    with pytest.raises(ValueError):
        table.finish(OP, "k-1", None, now=0.0)
    table.finish(OP, "k-1", RESULT, now=0.0)
    with pytest.raises(ValueError):
        table.abandon(OP, "k-1")


def test_the_digest_ignores_the_key_and_the_order_of_fields():
    reordered = dict(reversed(list(ARGS.items())))
    reordered["idempotency_key"] = "another"
    assert args_digest(reordered) == DIGEST
    assert args_digest({"metadata": {"b": 1, "a": [1, {"y": 2, "x": 3}]}}) == args_digest(
        {"metadata": {"a": [1, {"x": 3, "y": 2}], "b": 1}}
    )


@pytest.mark.parametrize(
    "change",
    [{"text": "hello!"}, {"submit": False}, {"session": "s-2"}, {"cols": 80}, {"text": b"hello"}],
)
def test_the_digest_tells_other_arguments_apart(change):
    assert args_digest({**ARGS, **change}) != DIGEST


def test_the_digest_tells_an_int_from_its_string():
    assert args_digest({"rows": 24}) != args_digest({"rows": "24"})
