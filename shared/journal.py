"""Writing log records to the journal's native socket, with the fields ``journalctl`` filters
on (``journalctl HERMES_PROFILE=coder``).

The socket is non-blocking: a journal that is slow or full never holds the event loop. A
record the socket refuses (no journald, a full queue, a datagram too large) goes to the
fallback handler, stderr, which under systemd is the journal's stream: the record is still
kept, without its fields, and never dropped silently.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Mapping
from typing import Any

from shared.journal_protocol import SOCKET, STREAM_ENV, encode, entry, is_journal_stream


def stderr_is_journal(env: Mapping[str, str], stderr_fd: int = 2) -> bool:
    """Whether systemd connected this process's stderr to the journal (``JOURNAL_STREAM``)."""
    try:
        st = os.fstat(stderr_fd)
    except OSError:  # no stderr at all
        return False
    return is_journal_stream(env.get(STREAM_ENV), st.st_dev, st.st_ino)


class JournalHandler(logging.Handler):
    def __init__(
        self,
        fields_of: Callable[[logging.LogRecord], Mapping[str, Any]],
        fallback: logging.Handler,
        address: str = SOCKET,
    ) -> None:
        super().__init__()
        self.fields_of, self.fallback, self.address = fields_of, fallback, address
        self.sock: socket.socket | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            datagram = encode(entry(self.fields_of(record), record))
        except Exception:
            self.handleError(record)
            return
        try:
            if self.sock is None:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self.sock.setblocking(False)
            self.sock.sendto(datagram, self.address)
        except OSError:
            self.fallback.handle(record)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self.fallback.close()
        super().close()
