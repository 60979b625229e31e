"""Parallel workers draw test ports from slices that never overlap."""

from __future__ import annotations

from tests.support.tcp import worker_ports


def test_each_worker_has_its_own_slice_and_together_they_stay_in_the_range():
    slices = [
        worker_ports({"PYTEST_XDIST_WORKER": f"gw{n}", "PYTEST_XDIST_WORKER_COUNT": "4"}, 10000, 32766)
        for n in range(4)
    ]
    for (_, end), (start, _) in zip(slices, slices[1:], strict=False):
        assert end <= start
    assert slices[0][0] == 10000 and slices[-1][1] <= 32766
    assert all(end - start > 1000 for start, end in slices)


def test_outside_a_worker_the_whole_range_is_drawn_from():
    assert worker_ports({}, 10000, 32766) == (10000, 32766)
    assert worker_ports({"PYTEST_XDIST_WORKER": "master", "PYTEST_XDIST_WORKER_COUNT": "4"}, 10000, 32766) == (
        10000,
        32766,
    )
