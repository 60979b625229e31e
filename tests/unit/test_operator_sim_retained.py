"""The simulator's retained output: the newest bytes by stream offset, and gaps said out loud."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulators.operator_sim.retained import CursorAhead, Page, Retained


def filled(limit: int, data: bytes) -> Retained:
    ring = Retained(limit)
    ring.append(data)
    return ring


def test_an_empty_ring_reads_empty_from_zero():
    ring = Retained(8)
    assert ring.read(None, 4) == Page(start=0, next=0, data=b"", gap=None, has_more=False)
    assert ring.read(0, 4) == Page(start=0, next=0, data=b"", gap=None, has_more=False)


def test_it_keeps_the_newest_bytes_and_counts_every_byte():
    ring = filled(4, b"abcdef")
    assert (ring.history_start, ring.end) == (2, 6)
    ring.append(b"gh")
    assert (ring.history_start, ring.end) == (4, 8)
    assert ring.read(4, 100).data == b"efgh"


def test_one_append_larger_than_the_limit_keeps_its_tail():
    ring = filled(4, b"ab")
    ring.append(b"0123456789")
    assert (ring.history_start, ring.end) == (8, 12)
    assert ring.read(8, 100).data == b"6789"


def test_no_cursor_reads_the_newest_tail_without_a_gap():
    ring = filled(8, b"0123456789")
    assert ring.read(None, 3) == Page(start=7, next=10, data=b"789", gap=None, has_more=False)
    assert ring.read(None, 100) == Page(start=2, next=10, data=b"23456789", gap=None, has_more=False)


def test_a_cursor_at_history_start_has_no_gap():
    ring = filled(8, b"0123456789")
    assert ring.read(2, 3) == Page(start=2, next=5, data=b"234", gap=None, has_more=True)


def test_a_cursor_below_history_start_reports_the_gap_and_reads_from_history_start():
    ring = filled(8, b"0123456789")
    assert ring.read(1, 3) == Page(start=2, next=5, data=b"234", gap=(1, 2), has_more=True)
    assert ring.read(0, 100) == Page(start=2, next=10, data=b"23456789", gap=(0, 2), has_more=False)


def test_a_cursor_at_the_end_reads_nothing_more():
    ring = filled(8, b"0123456789")
    assert ring.read(10, 4) == Page(start=10, next=10, data=b"", gap=None, has_more=False)


def test_a_cursor_beyond_the_end_is_refused_with_both_offsets():
    ring = filled(8, b"0123456789")
    with pytest.raises(CursorAhead) as caught:
        ring.read(11, 4)
    assert caught.value.code == "invalid_output_cursor"
    assert caught.value.detail == {"after_offset": "11", "runtime_end_offset": "10"}


def test_shrinking_the_limit_evicts_the_oldest_at_once():
    ring = filled(8, b"0123456789")
    ring.set_limit(3)
    assert (ring.history_start, ring.end) == (7, 10)
    assert ring.read(5, 10) == Page(start=7, next=10, data=b"789", gap=(5, 7), has_more=False)
    ring.set_limit(6)  # growing keeps what is left; evicted bytes do not come back
    ring.append(b"ab")
    assert ring.read(0, 10).data == b"789ab"


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_limits_and_page_sizes_must_be_positive_ints(bad):
    with pytest.raises(ValueError):
        Retained(bad)
    with pytest.raises(ValueError):
        Retained(4).set_limit(bad)
    with pytest.raises(ValueError):
        Retained(4).read(0, bad)


operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.binary(max_size=40)),
        st.tuples(st.just("limit"), st.integers(min_value=1, max_value=64)),
        st.tuples(st.just("read"), st.integers(min_value=1, max_value=24)),
    ),
    max_size=60,
)


@given(st.integers(min_value=1, max_value=64), operations)
def test_pages_that_follow_the_cursor_give_the_stream_minus_the_reported_gaps(limit, ops):
    ring = Retained(limit)
    stream = bytearray()
    cursor = 0
    seen = bytearray()
    gaps: list[tuple[int, int]] = []

    def read(max_bytes: int) -> None:
        nonlocal cursor
        page = ring.read(cursor, max_bytes)
        if page.gap is not None:
            assert page.gap == (cursor, ring.history_start)
            gaps.append(page.gap)
        assert page.start == (cursor if page.gap is None else page.gap[1]) >= cursor  # never backwards
        assert page.next - page.start == len(page.data) <= max_bytes
        assert page.has_more == (page.next < ring.end)
        seen.extend(page.data)
        cursor = page.next

    for name, value in ops:
        if name == "append":
            ring.append(value)
            stream.extend(value)
        elif name == "limit":
            ring.set_limit(value)
        else:
            read(value)
        assert ring.end == len(stream)
        assert ring.end - ring.history_start <= ring.limit  # memory stays bounded by the limit
    while cursor < ring.end:
        read(24)
    assert bytes(seen) == _without(bytes(stream), gaps)


def _without(stream: bytes, gaps: list[tuple[int, int]]) -> bytes:
    kept, at = bytearray(), 0
    for start, end in gaps:
        kept += stream[at:start]
        at = end
    return bytes(kept + stream[at:])


@given(st.lists(st.binary(max_size=40), max_size=20), st.integers(min_value=1, max_value=32), st.integers(1, 80))
def test_the_tail_is_the_newest_retained_bytes(chunks, limit, max_bytes):
    ring = Retained(limit)
    for chunk in chunks:
        ring.append(chunk)
    stream = b"".join(chunks)
    page = ring.read(None, max_bytes)
    assert page.gap is None and not page.has_more
    assert page.data == stream[max(ring.history_start, len(stream) - max_bytes) :]
