"""``session.wait``: its checked arguments, why it ends (in a fixed order), and the waiter caps."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shared.protocol import RemoteError
from simulators.operator_sim import waits
from simulators.operator_sim.waits import Snapshot, Waiters, wait_params, wait_reason

T0 = "2026-08-03T12:00:00.000000001Z"
T1 = "2026-08-03T12:00:00.000000002Z"
NOW = Snapshot(runtime=("w-1", 1), state="running", activity="working", output_end=100, watermark=7, updated_at=T0)
PAIR = {"worker_instance_id": "w-1", "runtime_generation": "1"}  # NOW's runtime, as a cursor carries it


def params(**args):
    return wait_params({"timeout_ms": 1000, **args}, NOW)


def refusal(args: dict) -> tuple[str, dict | None]:
    """The code and detail ``wait_params`` refuses ``args`` with."""
    with pytest.raises(RemoteError) as caught:
        wait_params(args, NOW)
    return caught.value.code, caught.value.detail


def test_the_reasons_are_the_daemons_in_its_order():
    assert waits.REASONS == (
        "runtime_changed",
        "state_matched",
        "activity_matched",
        "output_advanced",
        "terminal_changed",
        "session_updated",
        "timeout",
    )


def test_nothing_has_happened_yet_so_there_is_no_reason():
    waiting = params(
        worker_instance_id="w-1",
        runtime_generation="1",
        states=["done", "failed"],
        activities=["idle"],
        after_output_offset="100",
        after_terminal_watermark="7",
        after_updated_at=T0,
    )
    assert wait_reason(waiting, NOW) is None  # the caller answers "timeout" at the deadline


@pytest.mark.parametrize(
    "args,change,reason",
    [
        ({"worker_instance_id": "w-1", "runtime_generation": "1"}, {"runtime": ("w-2", 2)}, "runtime_changed"),
        ({"worker_instance_id": "w-1", "runtime_generation": "1"}, {"runtime": ("w-1", 2)}, "runtime_changed"),
        ({"worker_instance_id": "w-1", "runtime_generation": "1"}, {"runtime": (None, 1)}, "runtime_changed"),
        ({"states": ["stopped", "done"]}, {"state": "done"}, "state_matched"),
        ({"activities": ["idle", "blocked"]}, {"activity": "blocked"}, "activity_matched"),
        ({**PAIR, "after_output_offset": "100"}, {"output_end": 101}, "output_advanced"),
        ({**PAIR, "after_terminal_watermark": "7"}, {"watermark": 8}, "terminal_changed"),
        ({"after_updated_at": T0}, {"updated_at": T1}, "session_updated"),
    ],
)
def test_each_reason_holds_only_after_its_change(args, change, reason):
    waiting = params(**args)
    assert wait_reason(waiting, NOW) is None
    assert wait_reason(waiting, replace(NOW, **change)) == reason


def test_a_predicate_that_already_holds_ends_the_wait_at_once():
    assert wait_reason(params(states=["running"]), NOW) == "state_matched"
    assert wait_reason(params(**PAIR, after_output_offset="99"), NOW) == "output_advanced"


def test_an_earlier_reason_wins_when_several_hold():
    everything = params(
        worker_instance_id="w-1",
        runtime_generation="1",
        states=["done"],
        activities=["idle"],
        after_output_offset="100",
        after_terminal_watermark="7",
        after_updated_at=T0,
    )
    changes = {
        "runtime": ("w-2", 2),
        "state": "done",
        "activity": "idle",
        "output_end": 200,
        "watermark": 9,
        "updated_at": T1,
    }
    now = replace(NOW, **changes)
    for reason, field in zip(waits.REASONS, changes, strict=False):
        assert wait_reason(everything, now) == reason
        now = replace(now, **{field: getattr(NOW, field)})  # undo the winner: the next one shows
    assert wait_reason(everything, now) is None


def test_with_no_predicate_any_update_of_the_session_ends_the_wait():
    waiting = params()
    assert waiting.after_updated_at == T0
    assert wait_reason(waiting, NOW) is None
    assert wait_reason(waiting, replace(NOW, updated_at=T1)) == "session_updated"


def test_a_runtime_predicate_alone_keeps_no_updated_at_default():
    assert params(worker_instance_id="w-1", runtime_generation="1").after_updated_at is None


@pytest.mark.parametrize("timeout_ms", [0, -1, 8001, True, None, 1.5])
def test_a_timeout_outside_1_to_8000_ms_is_refused(timeout_ms):
    assert refusal({"timeout_ms": timeout_ms}) == ("invalid_field", {"field": "timeout_ms"})


@pytest.mark.parametrize("timeout_ms", [1, 8000])
def test_the_timeout_bounds_are_inclusive(timeout_ms):
    assert params(timeout_ms=timeout_ms).timeout_ms == timeout_ms


@pytest.mark.parametrize(
    "args,field",
    [
        ({"worker_instance_id": "w-1"}, "runtime_generation"),
        ({"runtime_generation": "1"}, "worker_instance_id"),
        ({"worker_instance_id": "", "runtime_generation": "1"}, "worker_instance_id"),
        ({"worker_instance_id": "w-1", "runtime_generation": "01"}, "runtime_generation"),
        ({**PAIR, "after_output_offset": "-0"}, "after_output_offset"),
        ({**PAIR, "after_terminal_watermark": "18446744073709551616"}, "after_terminal_watermark"),
        ({"after_output_offset": "100"}, "worker_instance_id"),
        ({"after_terminal_watermark": "7"}, "worker_instance_id"),
        ({"states": []}, "states"),
        ({"states": ["running", "running"]}, "states"),
        ({"states": ["sleeping"]}, "states"),
        ({"states": [1]}, "states"),
        ({"activities": ["idle", "idle"]}, "activities"),
        ({"activities": ["running"]}, "activities"),
        ({"after_updated_at": "2026-08-03T12:00:00Z"}, "after_updated_at"),
        ({"after_updated_at": "2026-08-03T12:00:00.000000001+00:00"}, "after_updated_at"),
    ],
)
def test_bad_predicates_are_refused_naming_the_field(args, field):
    assert refusal({"timeout_ms": 1000, **args}) == ("invalid_field", {"field": field})


def test_the_per_session_cap():
    waiters = Waiters()
    for _ in range(waits.PER_SESSION_WAITERS):
        waiters.enter("s-1")
    with pytest.raises(RemoteError) as caught:
        waiters.enter("s-1")
    assert caught.value.code == "session_waiter_limit_reached"
    assert caught.value.detail == {"limit": 8, "scope": "session"}
    waiters.enter("s-2")  # another session still may wait
    waiters.leave("s-1")
    waiters.enter("s-1")  # a freed place can be taken again
    assert waiters.count("s-1") == 8


def test_the_daemon_wide_cap():
    waiters = Waiters()
    for n in range(waits.TOTAL_WAITERS):
        waiters.enter(f"s-{n % 16}")
    with pytest.raises(RemoteError) as caught:
        waiters.enter("s-new")
    assert caught.value.detail == {"limit": 128, "scope": "daemon"}
    waiters.leave("s-3")
    waiters.enter("s-new")
    assert waiters.count() == 128


def test_leaving_more_than_entered_is_a_bug():
    waiters = Waiters()
    waiters.enter("s-1")
    waiters.leave("s-1")
    with pytest.raises(ValueError):
        waiters.leave("s-1")
    assert waiters.count() == 0
