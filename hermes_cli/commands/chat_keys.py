"""The owner's keys at the ``hermes chat`` prompt, as bytes come from the terminal: a pure
decoder of one line, with no I/O.

The session daemon types into Hermes as the real Hermes 0.20.0 takes it: the text in one
bracketed paste (``ESC[200~`` … ``ESC[201~``), then ``\\r`` in a write of its own. A paste is
text whatever it holds: its newlines (``\\r`` or ``\\n``) stay in the line, so a paste of three
lines is one turn, submitted by the ``\\r`` after it. Outside a paste ``\\r`` or ``\\n`` ends the
line, backspace and delete take back one character, Ctrl-D on an empty line ends the chat.

Other escape sequences (arrow keys, a stray ``ESC[201~``, a paste start inside a paste) are
read whole and dropped; a lone ESC is dropped with it. A sequence cut at the end of what has
come so far waits for the rest; one longer than ``MAX_SEQUENCE`` is dropped to its end, however
long it runs. Ctrl-C inside a
paste that never ended drops the line (the daemon never pastes one). The line is at most
``limit`` bytes: past it ``too_long`` is set and the rest is not kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

ESC = 0x1B
CTRL_C, CTRL_D, BACKSPACE, DELETE = 0x03, 0x04, 0x08, 0x7F
PASTE_START, PASTE_END = b"\x1b[200~", b"\x1b[201~"
MAX_SEQUENCE = 32
# ESC [ parameters intermediates final; ESC O and a key; ESC and a printable key (Alt+key).
_SEQUENCE = re.compile(rb"\x1b(?:\[[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]|O[\x20-\x7e]|[\x20-\x4e\x50-\x5a\x5c-\x7e])")
_UNFINISHED = re.compile(rb"\x1b(?:\[[\x30-\x3f]*[\x20-\x2f]*|O)?\Z")
_PARAMETERS = re.compile(rb"\x1b\[[\x30-\x3f]*[\x20-\x2f]*")

SUBMIT, END = "submit", "end"


@dataclass
class LineKeys:
    """One line being typed. ``feed`` takes bytes and says how many it used; ``echo`` holds what
    to show for them."""

    limit: int
    line: bytearray = field(default_factory=bytearray)
    too_long: bool = False
    in_paste: bool = False
    skipping: bool = False  # inside a sequence too long to be a key, dropping it to its end
    echo: bytearray = field(default_factory=bytearray)

    def feed(self, data: bytes) -> tuple[int, str | None]:
        """Decode ``data`` up to the end of the line: ``(bytes used, SUBMIT | END | None)``.
        Bytes not used are the next line's, or the rest of a sequence still coming."""
        at = 0
        while at < len(data):
            byte = data[at]
            if self.skipping:
                self.skipping = 0x20 <= byte <= 0x3F
                at += 1 if self.skipping or 0x40 <= byte <= 0x7E else 0
                continue
            if byte == ESC:
                used = self._sequence(data, at)
                if used == 0:
                    return at, None  # cut off: wait for the rest
                at += used
                continue
            at += 1
            if self.in_paste:
                if byte == CTRL_C:
                    self.line.clear()
                    self.in_paste = self.too_long = False
                    return at, SUBMIT  # an empty line: nothing runs
                if byte in b"\r\n\t" or byte >= 0x20 and byte != DELETE:
                    self._add(b"\n" if byte == 0x0D else bytes([byte]))
                continue
            if byte in b"\r\n":
                return at, SUBMIT
            if byte == CTRL_D and not self.line:
                return at, END
            if byte in (BACKSPACE, DELETE):
                self._erase()
            elif byte >= 0x20:
                self._add(bytes([byte]))
            # other control keys do nothing at the prompt (Ctrl-C too)
        return at, None

    def done(self) -> tuple[str, bool]:
        """The line typed (decoded with replacement) and whether it was too long; then a new line."""
        text, too_long = self.line.decode("utf-8", errors="replace"), self.too_long
        self.line.clear()
        self.too_long = self.in_paste = False
        return text, too_long

    def _sequence(self, data: bytes, at: int) -> int:
        found = _SEQUENCE.match(data, at)
        if found is None or len(found.group(0)) > MAX_SEQUENCE:
            if found is None and _UNFINISHED.match(data, at) and len(data) - at < MAX_SEQUENCE:
                return 0
            # Dropped: a lone ESC before a control key, or a sequence too long to be a key.
            long = _PARAMETERS.match(data, at)
            if long is None:
                return 1
            self.skipping = True
            return 2
        sequence = found.group(0)
        if sequence == PASTE_START:
            self.in_paste = True
        elif sequence == PASTE_END:
            self.in_paste = False
        return len(sequence)

    def _add(self, data: bytes) -> None:
        if len(self.line) + len(data) > self.limit:
            self.too_long = True
            return
        self.line += data
        self.echo += b"\r\n" if data == b"\n" else data

    def _erase(self) -> None:
        if not self.line:
            return
        while len(self.line) > 1 and self.line[-1] & 0xC0 == 0x80:  # a UTF-8 continuation
            self.line.pop()
        self.line.pop()
        self.echo += b"\b \b"
