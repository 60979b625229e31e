"""The turn accounting a gateway's ``status`` answers: a count, the latest time, and a
cumulative latency histogram over ``ops.TURN_LATENCY_BUCKETS``."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.gateway.turn_stats import INF, TurnStats
from shared.gateways.ops import MAX_TURN_SECONDS, TURN_LATENCY_BUCKETS


def test_the_bounds_ascend_from_5_ms_to_the_longest_turn():
    assert list(TURN_LATENCY_BUCKETS) == sorted(set(TURN_LATENCY_BUCKETS))
    assert TURN_LATENCY_BUCKETS[0] == 0.005 and TURN_LATENCY_BUCKETS[-1] == MAX_TURN_SECONDS


def test_no_turn_yet():
    assert TurnStats().to_dict() == {
        "finished": 0,
        "last_seconds": None,
        "latency": {"le": [*TURN_LATENCY_BUCKETS, INF], "counts": [0] * (len(TURN_LATENCY_BUCKETS) + 1), "sum": 0.0},
    }


def test_a_bound_is_inclusive_and_a_turn_past_every_bound_is_counted_in_inf_alone():
    stats = TurnStats((0.1, 1.0))
    for seconds in (0.1, 0.5, 1.0, 2.0, -0.1):
        stats.observe(seconds)
    assert stats.to_dict() == {
        "finished": 5,
        "last_seconds": 0.0,  # a clock's step back counts as no time
        "latency": {"le": [0.1, 1.0, INF], "counts": [2, 4, 5], "sum": 3.6},
    }


@given(st.lists(st.floats(min_value=0, max_value=400), max_size=50))
def test_the_histogram_is_cumulative_and_its_last_count_is_the_turns_finished(times):
    stats = TurnStats()
    for seconds in times:
        stats.observe(seconds)
    answer = stats.to_dict()
    counts = answer["latency"]["counts"]
    assert counts == sorted(counts) and counts[-1] == answer["finished"] == len(times)
    for bound, count in zip(answer["latency"]["le"][:-1], counts, strict=False):
        assert count == sum(1 for t in times if t <= bound)
    assert answer["last_seconds"] == (round(times[-1], 6) if times else None)
