"""The chat's line decoder: a bracketed paste is one line whatever it holds, odd sequences are
dropped whole, and the line stays bounded, however the bytes are cut into reads."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_cli.commands.chat_keys import END, MAX_SEQUENCE, SUBMIT, LineKeys


def lines(*reads: bytes, limit: int = 1000) -> tuple[list[tuple[str, str, bool]], LineKeys]:
    """Every line the reads end, as the chat takes them: unused bytes wait for the next read."""
    keys, pending, done = LineKeys(limit), b"", []
    for data in reads:
        pending += data
        while pending:
            used, event = keys.feed(pending)
            pending = pending[used:]
            if event is None:
                break
            done.append((event, *keys.done()))
    return done, keys


def test_a_paste_then_its_submit_is_one_line_newlines_and_all():
    got, _ = lines(b"\x1b[200~Treat all three lines as one prompt.\nalpha\r\nbeta\x1b[201~", b"\r")
    assert got == [(SUBMIT, "Treat all three lines as one prompt.\nalpha\n\nbeta", False)]


@pytest.mark.parametrize("cut", range(1, 40))
def test_a_paste_cut_anywhere_reads_the_same(cut):
    data = b"\x1b[200~a\nb\x1b[201~\r"
    assert lines(data[:cut], data[cut:])[0] == [(SUBMIT, "a\nb", False)]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"\x1b\r", ""),  # a lone ESC: the Enter after it still submits
        (b"\x1b[20\r", ""),
        (b"\x1b[20xok\r", "ok"),
        (b"\x1b[201~ok\r", "ok"),
        (b"\x1b[A\x1bOB\x1bxok\r", "ok"),
        (b"\x1b[200~\x1b[200~in\x1b[201~\x1b[201~\r", "in"),
        (b"\x1b[200~left\x03ok\r", "ok"),  # Ctrl-C leaves a paste that never ended, with its text
        (b"\x1b[200~tab\tdel\x7f\x04x\x1b[201~\r", "tab\tdelx"),  # controls in a paste are not keys
        (b"ab\x7fc\r", "ac"),
    ],
)
def test_odd_input_is_dropped_and_the_line_goes_on(data, expected):
    got, _ = lines(data)
    assert [text for _, text, _ in got][-1] == expected
    assert all(event == SUBMIT for event, _, _ in got)


def test_a_sequence_too_long_to_be_a_key_is_dropped_to_its_end_across_reads():
    got, keys = lines(b"\x1b[" + b"9" * 5000, b"9" * 5000, b"mok\r")
    assert got == [(SUBMIT, "ok", False)]
    assert not keys.skipping


def test_ctrl_d_on_an_empty_line_ends_and_elsewhere_does_nothing():
    assert lines(b"\x04")[0] == [(END, "", False)]
    assert lines(b"a\x04\r")[0] == [(SUBMIT, "a", False)]


def test_a_line_over_the_limit_is_marked_and_bounded():
    got, keys = lines(b"\x1b[200~" + b"x" * 50 + b"\x1b[201~\r", limit=10)
    assert got == [(SUBMIT, "x" * 10, True)]
    assert len(keys.line) == 0


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=20))
def test_any_bytes_keep_the_line_and_the_waiting_bytes_bounded(reads):
    keys, pending = LineKeys(100), b""
    for data in reads:
        pending += data
        while pending:
            used, event = keys.feed(pending)
            assert 0 <= used <= len(pending)
            pending = pending[used:]
            if event is None:
                break
            keys.done()
        assert len(keys.line) <= 100
        assert len(pending) < MAX_SEQUENCE  # only the start of a sequence waits
