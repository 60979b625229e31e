"""The simulator's rendered screen: text, cursor, split and invalid UTF-8, the alternate-screen
scan, the watermark, resize, bounds and garbage."""

from __future__ import annotations

import pyte
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wcwidth import wcwidth

from simulators.operator_sim import screen as screen_module
from simulators.operator_sim.screen import MAX_CELL_BYTES, MAX_COLS, MAX_SEQUENCE_CHARS, InvalidGeometry, Screen


def test_the_hermes_prompt_renders_with_the_cursor_after_it():
    screen = Screen(40, 5)
    assert screen.feed("\r\n⚕ ❯ ".encode())
    snap = screen.snapshot()
    assert snap["visible_lines"] == ["", "⚕ ❯", "", "", ""]
    assert snap["cursor"] == {"row": 1, "col": 4, "visible": True}
    assert snap["dimensions"] == {"cols": 40, "rows": 5}
    assert snap["alternate_screen"] is False
    assert snap["title"] is None
    assert snap["utf8_replaced"] == 0


def test_cursor_moves_and_hides():
    screen = Screen(20, 10)
    screen.feed(b"\x1b[5;8H\x1b[?25l")
    assert screen.snapshot()["cursor"] == {"row": 4, "col": 7, "visible": False}
    screen.feed(b"\x1b[?25h")
    assert screen.snapshot()["cursor"]["visible"] is True


def test_a_pending_wrap_reports_the_last_column():
    screen = Screen(5, 2)
    screen.feed(b"abcde")
    assert screen.snapshot()["cursor"] == {"row": 0, "col": 4, "visible": True}


def test_the_title_is_shown():
    screen = Screen(20, 3)
    assert screen.feed(b"\x1b]0;hermes chat\x07")
    assert screen.snapshot()["title"] == "hermes chat"


@pytest.mark.parametrize("text", ["é", "❯", "⚕", "🙂"])
def test_a_character_split_across_feeds_decodes_whole(text):
    raw = text.encode()
    for cut in range(1, len(raw)):
        screen = Screen(10, 2)
        assert not screen.feed(raw[:cut])  # nothing to draw yet
        assert screen.feed(raw[cut:])
        assert screen.visible_lines()[0] == text
        assert screen.utf8_replaced == 0


def test_invalid_bytes_become_replacement_characters_and_are_counted():
    screen = Screen(20, 2)
    screen.feed(b"a\xffb\xc3(c\xe2\x82")  # a lone 0xff, a bad continuation, and an unfinished sequence
    assert screen.visible_lines()[0] == "a\ufffdb\ufffd(c"
    assert screen.utf8_replaced == 2
    screen.feed(b"d")  # the unfinished sequence is cut short by a letter
    assert screen.visible_lines()[0] == "a\ufffdb\ufffd(c\ufffdd"
    assert screen.utf8_replaced == 3
    assert screen.snapshot()["utf8_replaced"] == 3


def test_a_real_replacement_character_is_not_counted():
    screen = Screen(10, 2)
    screen.feed("\ufffd".encode())
    assert screen.visible_lines()[0] == "\ufffd"
    assert screen.utf8_replaced == 0


@pytest.mark.parametrize("mode", ["1049", "1047", "47", "25;1049", "1049;25"])
def test_the_alternate_screen_is_tracked(mode):
    screen = Screen(20, 3)
    assert screen.feed(f"\x1b[?{mode}h".encode())
    assert screen.snapshot()["alternate_screen"] is True
    assert screen.feed(f"\x1b[?{mode}l".encode())
    assert screen.snapshot()["alternate_screen"] is False


def test_the_alternate_screen_switch_split_across_feeds_is_seen_at_every_cut():
    sequence = b"x\x1b[?1049h"
    for cut in range(1, len(sequence)):
        screen = Screen(20, 3)
        screen.feed(sequence[:cut])
        assert screen.snapshot()["alternate_screen"] is False
        screen.feed(sequence[cut:])
        assert screen.snapshot()["alternate_screen"] is True


def test_the_eight_bit_csi_switches_too():
    screen = Screen(20, 3)
    screen.feed("\x9b?1049h".encode())
    assert screen.snapshot()["alternate_screen"] is True


def test_other_private_modes_leave_the_alternate_screen_alone():
    screen = Screen(20, 3)
    screen.feed(b"\x1b[?1049h\x1b[?2004l\x1b[?10490l")
    assert screen.snapshot()["alternate_screen"] is True


def test_the_watermark_moves_only_when_the_display_changes():
    screen = Screen(20, 3)
    assert screen.watermark == 0
    assert screen.feed(b"hi")
    assert screen.watermark == 1
    assert not screen.feed(b"")
    assert not screen.feed(b"\x1b[1;3H")  # the cursor is already there
    assert not screen.feed(b"\x1b[0m\x07")  # attributes reset and a bell: nothing shown changes
    assert not screen.feed(b"\x1b[1;1Hhi")  # the same text over itself
    assert screen.watermark == 1
    assert screen.feed(b"\x1b[2;1H")  # the cursor alone moves
    assert screen.watermark == 2
    assert screen.feed(b"\x1b[31mx")  # a coloured cell
    assert screen.watermark == 3
    assert screen.feed(b"\x1b[2J")  # cleared
    assert screen.watermark == 4
    assert not screen.feed(b"\x1b[2J")  # cleared again: already blank
    assert screen.watermark == 4


def test_a_resize_changes_the_dimensions_and_the_watermark():
    screen = Screen(80, 24)
    screen.feed(b"hello")
    mark = screen.watermark
    screen.resize(100, 30)
    assert screen.watermark == mark + 1
    snap = screen.snapshot()
    assert snap["dimensions"] == {"cols": 100, "rows": 30}
    assert len(snap["visible_lines"]) == 30
    assert snap["visible_lines"][0] == "hello"
    screen.resize(100, 30)  # the same size is no change
    assert screen.watermark == mark + 1
    screen.resize(3, 30)
    assert screen.visible_lines()[0] == "hel"
    screen.resize(3, 2)
    assert len(screen.visible_lines()) == 2
    assert screen.watermark == mark + 3


@pytest.mark.parametrize(("cols", "rows"), [(0, 24), (80, 0), (MAX_COLS + 1, 24), (80, True), (80.0, 24), ("80", 24)])
def test_a_bad_geometry_is_a_typed_error(cols, rows):
    with pytest.raises(InvalidGeometry) as caught:
        Screen(cols, rows)
    assert caught.value.code == "invalid_field"
    assert caught.value.detail["field"] in ("cols", "rows")
    screen = Screen(80, 24)
    with pytest.raises(InvalidGeometry):
        screen.resize(cols, rows)
    assert screen.snapshot()["dimensions"] == {"cols": 80, "rows": 24}


def test_a_title_that_never_ends_is_dropped_and_the_screen_goes_on():
    screen = Screen(20, 3)
    screen.feed(b"\x1b]0;" + b"t" * (MAX_SEQUENCE_CHARS * 3))
    # pyte's parser no longer holds the unterminated title: a later title and text work.
    screen.feed(b"\x1b[2J\x1b[H\x1b]2;short\x07ok")
    snap = screen.snapshot()
    assert snap["title"] == "short"
    assert snap["visible_lines"][0] == "ok"


def test_a_sequence_pyte_cannot_parse_does_not_raise():
    screen = Screen(20, 3)
    screen.feed("\x1b[²5H".encode())  # a non-ASCII digit pyte passes to int()
    screen.feed(b"\x1b[H\x1b[2Jfine")
    assert screen.visible_lines()[0] == "fine"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=8), st.integers(1, 40), st.integers(1, 12))
def test_garbage_never_raises_and_keeps_the_geometry(chunks, cols, rows):
    screen = Screen(cols, rows)
    for chunk in chunks:
        screen.feed(b"\x1b" + chunk)
    snap = screen.snapshot()
    assert len(snap["visible_lines"]) == rows
    # A combining or zero-width character shares its cell with the one before.
    assert all(sum(1 for char in line if wcwidth(char) != 0) <= cols for line in snap["visible_lines"])
    assert 0 <= snap["cursor"]["row"] < rows
    assert 0 <= snap["cursor"]["col"] < cols


@settings(max_examples=200, deadline=None)
@given(
    chunks=st.lists(
        st.sampled_from(["ab", "宽字", "e\u0301", "\r\n", "\x1b[2K", "\x1b[H", "⚕ ❯ ", "x" * 130, "\x1b[5;3H"]),
        max_size=30,
    )
)
def test_the_rows_kept_per_change_read_as_pyte_renders_the_whole_screen(chunks):
    screen = Screen(40, 6)
    reference = screen_module._Screen(40, 6)
    stream = pyte.Stream(reference)
    for chunk in chunks:
        screen.feed(chunk.encode())
        stream.feed(chunk)
    try:
        rendered = [line.rstrip() for line in reference.display]
    except IndexError:  # pyte's own display fails on a combining mark over a wide character's stub
        assert len(screen.visible_lines()) == 6
        return
    assert screen.visible_lines() == rendered


def test_a_combining_mark_over_a_wide_characters_stub_renders():
    # pyte's whole-screen display raises IndexError here; a screen read must not.
    screen = Screen(40, 6)
    for chunk in ("\x1b[5;3H", "宽字", "\x1b[5;3H", "é"):
        screen.feed(chunk.encode())
    assert screen.visible_lines()[4].startswith("  ")


# What the daemon's terminal (the vt100 crate behind crates/terminal/src/screen.rs) keeps: a
# zero-width character joins the cell before it unchanged, a wide one takes two cells.


def test_an_emoji_variation_selector_keeps_the_rest_of_the_line():
    # The real Hermes 0.20.0 approval panel's title line.
    line = "│ ⚠️  Dangerous Command                          │"
    screen = Screen(100, 3)
    screen.feed(line.encode() + "\r\n⚙️  /exit".encode())
    assert screen.visible_lines()[:2] == [line, "⚙️  /exit"]
    # pyte alone loses everything after the selector.
    reference = pyte.Screen(100, 3)
    pyte.Stream(reference).feed(line)
    assert reference.display[0].rstrip() == "│ ⚠"


@pytest.mark.parametrize("joiner", ["\u200d", "\ufe0e", "\u200b", "\u20e3"])
def test_every_zero_width_character_joins_the_cell_before_it(joiner):
    screen = Screen(20, 2)
    screen.feed(f"a{joiner}b|".encode())
    assert screen.visible_lines()[0] == f"a{joiner}b|"
    assert screen.snapshot()["cursor"]["col"] == 3


def test_wide_characters_take_two_cells():
    screen = Screen(20, 2)
    screen.feed("a界b💻c".encode())
    assert screen.visible_lines()[0] == "a界b💻c"
    assert screen.snapshot()["cursor"]["col"] == 7
    screen.feed(b"\x1b[1;3Hx\x1b[1;5Hy")  # over the second half of 界, the first of 💻
    assert screen.visible_lines()[0] == "a xby c"  # each wide character goes whole
    screen.feed("\x1b[1;20H界".encode())  # one column left: the wide character wraps
    assert screen.visible_lines()[1] == "界"


def test_a_combining_mark_is_kept_as_written_and_joins_a_wide_character_whole():
    screen = Screen(20, 2)
    screen.feed("e\u0301 界\u0301|".encode())
    assert screen.visible_lines()[0] == "e\u0301 界\u0301|"  # no NFC: "é" stays two code points


def test_a_zero_width_character_at_the_start_of_a_line_is_dropped():
    screen = Screen(20, 2)
    screen.feed("\r\n\u0301ok".encode())
    assert screen.visible_lines()[1] == "ok"


def test_a_cell_holds_a_bounded_number_of_joiners():
    screen = Screen(20, 2)
    screen.feed(("a" + "\u0301" * 10_000 + "b").encode())
    first = screen.visible_lines()[0]
    assert first.startswith("a\u0301") and first.endswith("b")
    assert len(first[:-1].encode()) <= MAX_CELL_BYTES


def test_a_c1_control_in_text_is_skipped_and_the_rest_drawn():
    screen = Screen(20, 2)
    screen.feed("a\u0085b ⚕".encode())
    assert screen.visible_lines()[0] == "ab ⚕"
