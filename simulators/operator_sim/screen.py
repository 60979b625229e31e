"""A session's rendered screen: pyte fed with the PTY's bytes, plus what pyte does not track.

Characters are drawn as the daemon's terminal (the vt100 crate) draws them: a wide character
takes two cells, and a zero-width one (a combining mark, a variation selector such as the
U+FE0F of ``⚠️``, a joiner) joins the cell before it unchanged, up to ``MAX_CELL_BYTES``, and
a character written over half of a wide one blanks its other half. pyte 0.8.2 stops drawing the
rest of the text at a zero-width character that is not a combining mark (``⚠️  Dangerous
Command`` would read ``⚠``), merges a mark by NFC and leaves half a wide character behind, so
``_Screen`` draws text itself (pyte's own ``draw`` is one loop over the characters); parsing,
cursor moves and erasing stay pyte's.

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
from pyte import modes as mo
from wcwidth import wcwidth

from shared.operator.protocol import MAX_COLS, MAX_ROWS, OperatorError
from shared.protocol import Code as WireCode

# pyte is fed in slices of this size, so an unterminated sequence is seen within one slice.
_SLICE = 4096
MAX_SEQUENCE_CHARS = 4 * _SLICE
_ALT_MODES = frozenset({"1049", "1047", "47"})
_PRIVATE_MODE = re.compile(r"(?:\x1b\[|\x9b)\?([0-9;]*)([hl])")
# The start of a private mode sequence cut off at the end of a feed.
_PRIVATE_MODE_PREFIX = re.compile(r"(?:\x1b|\x1b\[|\x9b)(?:\?[0-9;]*)?\Z")
_PREFIX_MAX = 64
_REPLACEMENT = "\ufffd"
MAX_CELL_BYTES = 18  # what the daemon's terminal keeps of a cell's text before it drops joiners


class InvalidGeometry(OperatorError):
    code = WireCode.INVALID_FIELD


def check_geometry(cols: int, rows: int) -> None:
    """A terminal size is whole columns and rows within the bounds; else ``InvalidGeometry``."""
    for field, value, top in (("cols", cols, MAX_COLS), ("rows", rows, MAX_ROWS)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
            raise InvalidGeometry(f"{field} must be a whole number from 1 to {top}", detail={"field": field})


class _Screen(pyte.Screen):
    """pyte's screen, drawing text as the daemon's terminal does (see the module's doc)."""

    def draw(self, data: str) -> None:
        data = data.translate(self.g1_charset if self.charset else self.g0_charset)
        for char in data:
            width = wcwidth(char)
            if width == 0:
                self._join(char)
                continue
            if width < 0:
                continue  # no width at all (a C1 control): not drawn
            if self.cursor.x + width > self.columns:  # it does not fit: the line wraps
                if mo.DECAWM in self.mode:
                    self.dirty.add(self.cursor.y)
                    self.carriage_return()
                    self.linefeed()
                else:
                    self.cursor.x = self.columns - width
            if mo.IRM in self.mode:
                self.insert_characters(width)
            line, x = self.buffer[self.cursor.y], self.cursor.x
            for at in range(x, x + width):  # a wide character partly overwritten goes whole
                self._unsplit(line, at)
            line[x] = self.cursor.attrs._replace(data=char)
            if width == 2:
                line[x + 1] = self.cursor.attrs._replace(data="")
            self.cursor.x = x + width
        self.dirty.add(self.cursor.y)

    def _unsplit(self, line: Any, x: int) -> None:
        if line[x].data == "" and x > 0 and _is_wide(line[x - 1]):
            line[x - 1] = line[x - 1]._replace(data=" ")
        elif _is_wide(line[x]) and x + 1 < self.columns:
            line[x + 1] = line[x + 1]._replace(data=" ")

    def _join(self, char: str) -> None:
        """``char`` joins the cell before the cursor (a wide character, past its second half);
        at the start of a line there is none and it is dropped."""
        x, line = self.cursor.x, self.buffer[self.cursor.y]
        if x > 1 and line[x - 1].data == "" and _is_wide(line[x - 2]):
            x -= 1
        if x == 0:
            return
        cell = line[x - 1]
        text = cell.data or " "
        if len(text.encode()) + len(char.encode()) <= MAX_CELL_BYTES:
            line[x - 1] = cell._replace(data=text + char)
            self.dirty.add(self.cursor.y)


def _is_wide(cell: Any) -> bool:
    return bool(cell.data) and wcwidth(cell.data[0]) == 2


class Screen:
    def __init__(self, cols: int, rows: int) -> None:
        check_geometry(cols, rows)
        self._screen = _Screen(cols, rows)
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
        wide = _is_wide(cell)
    return "".join(out).rstrip()
