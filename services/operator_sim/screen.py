"""A session's rendered screen: pyte fed with the PTY's bytes, plus what pyte does not track.

Bytes are decoded incrementally (a character split across two reads decodes whole; invalid
bytes become U+FFFD and are counted). The watermark moves once per feed that changed the
display (a cell, the cursor or the title), so a waiter can tell "something new to see" from
"bytes that drew nothing". The alternate-screen flag is our own scan for DEC private modes
1049/1047/47, because pyte ignores them.

Everything is bounded: ``pyte.Screen`` keeps no history, and an escape sequence that never
ends (pyte would accumulate its parameters without limit) is dropped after
``MAX_SEQUENCE_CHARS``. pyte raising on garbage resets its parser; the rest of that slice is lost.
"""

from __future__ import annotations

import codecs
import re
from typing import Any

import pyte
from wcwidth import wcwidth

from shared.errors import HermesError
from shared.operator.protocol import MAX_COLS, MAX_ROWS

# pyte is fed in slices of this size, so an unterminated sequence is seen within one slice.
_SLICE = 4096
MAX_SEQUENCE_CHARS = 4 * _SLICE
_ALT_MODES = frozenset({"1049", "1047", "47"})
_PRIVATE_MODE = re.compile(r"(?:\x1b\[|\x9b)\?([0-9;]*)([hl])")
# The start of a private mode sequence cut off at the end of a feed.
_PRIVATE_MODE_PREFIX = re.compile(r"(?:\x1b|\x1b\[|\x9b)(?:\?[0-9;]*)?\Z")
_PREFIX_MAX = 64
_REPLACEMENT = "\ufffd"


class InvalidGeometry(HermesError):
    code = "invalid_field"


def check_geometry(cols: int, rows: int) -> None:
    """A terminal size is whole columns and rows within the bounds; else ``InvalidGeometry``."""
    for field, value, top in (("cols", cols, MAX_COLS), ("rows", rows, MAX_ROWS)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
            raise InvalidGeometry(f"{field} must be a whole number from 1 to {top}", detail={"field": field})


class Screen:
    def __init__(self, cols: int, rows: int) -> None:
        check_geometry(cols, rows)
        self._screen = pyte.Screen(cols, rows)
        self._stream = pyte.Stream(self._screen)
        self._pending = b""  # the start of a UTF-8 sequence cut off at the end of a feed
        self._mode_tail = ""  # the start of a private mode sequence cut off likewise
        self._sequence_chars = 0  # an upper bound on the length of the escape sequence pyte is in
        self._alternate = False
        self._rows = self._all_rows()
        self._texts = [_text(row) for row in self._rows]  # each row rendered once per change of it
        self._view = self._view_state()
        self.watermark = 0
        self.utf8_replaced = 0

    def feed(self, data: bytes) -> bool:
        """Render ``data``; True when the display (a cell, the cursor or the title) changed."""
        text = self._decode(data)
        self._scan_modes(text)
        self._screen.dirty.clear()
        for start in range(0, len(text), _SLICE):
            self._feed_pyte(text[start : start + _SLICE])
        changed = False
        for y in self._screen.dirty:
            if 0 <= y < self._screen.lines:
                row = self._row(y)
                if row != self._rows[y]:
                    self._rows[y] = row
                    self._texts[y] = _text(row)
                    changed = True
        view = self._view_state()
        if view != self._view:
            self._view = view
            changed = True
        if changed:
            self.watermark += 1
        return changed

    def resize(self, cols: int, rows: int) -> None:
        check_geometry(cols, rows)
        if (cols, rows) == (self._screen.columns, self._screen.lines):
            return
        self._screen.resize(lines=rows, columns=cols)
        self._rows = self._all_rows()
        self._texts = [_text(row) for row in self._rows]
        self._view = self._view_state()
        self.watermark += 1

    def visible_lines(self) -> list[str]:
        return list(self._texts)

    def snapshot(self) -> dict[str, Any]:
        cursor = self._screen.cursor
        return {
            "dimensions": {"cols": self._screen.columns, "rows": self._screen.lines},
            # pyte leaves the cursor one past the last column while a wrap is pending.
            "cursor": {"row": cursor.y, "col": min(cursor.x, self._screen.columns - 1), "visible": not cursor.hidden},
            "alternate_screen": self._alternate,
            "title": self._screen.title or None,
            "visible_lines": self.visible_lines(),
            "utf8_replaced": self.utf8_replaced,
        }

    def _decode(self, data: bytes) -> str:
        buffer = memoryview(self._pending + data)
        parts: list[str] = []
        while True:
            try:
                text, used = codecs.utf_8_decode(buffer, "strict", False)
            except UnicodeDecodeError as exc:
                parts.append(codecs.utf_8_decode(buffer[: exc.start], "strict", True)[0])
                parts.append(_REPLACEMENT)
                self.utf8_replaced += 1
                buffer = buffer[exc.end :]
                continue
            parts.append(text)
            self._pending = bytes(buffer[used:])
            return "".join(parts)

    def _scan_modes(self, text: str) -> None:
        text = self._mode_tail + text
        end = 0
        for match in _PRIVATE_MODE.finditer(text):
            if _ALT_MODES.intersection(match.group(1).split(";")):
                self._alternate = match.group(2) == "h"
            end = match.end()
        tail = text[max(end, len(text) - _PREFIX_MAX) :]
        cut = _PRIVATE_MODE_PREFIX.search(tail)
        self._mode_tail = cut.group(0) if cut else ""

    def _feed_pyte(self, text: str) -> None:
        in_sequence_before = self._stream._taking_plain_text is not True
        try:
            self._stream.feed(text)
        except Exception:  # garbage pyte cannot parse (it has reset itself); the display stays valid
            self._sequence_chars = 0
            return
        if self._stream._taking_plain_text is True:
            self._sequence_chars = 0
            return
        self._sequence_chars = (self._sequence_chars if in_sequence_before else 0) + len(text)
        if self._sequence_chars > MAX_SEQUENCE_CHARS:
            self._stream._initialize_parser()  # drop the sequence that never ends
            self._sequence_chars = 0

    def _row(self, y: int) -> tuple[Any, ...]:
        line = self._screen.buffer[y]
        return tuple(line[x] for x in range(self._screen.columns))

    def _all_rows(self) -> list[tuple[Any, ...]]:
        return [self._row(y) for y in range(self._screen.lines)]

    def _view_state(self) -> tuple[Any, ...]:
        cursor = self._screen.cursor
        return (cursor.x, cursor.y, cursor.hidden, self._screen.title, self._alternate)


def _text(row: tuple[Any, ...]) -> str:
    """A row as pyte's ``display`` renders it (the stub cell after a wide character skipped),
    right-stripped. Per row, so a change costs the rows it touched: measuring every cell's
    width for a whole screen takes milliseconds."""
    out: list[str] = []
    wide = False
    for cell in row:
        if wide:
            wide = False
            continue
        out.append(cell.data)
        wide = bool(cell.data) and wcwidth(cell.data[0]) == 2
    return "".join(out).rstrip()
