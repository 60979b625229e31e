"""Where every gateway's watch leaves its row, for the one thread that shows them.

A watch reports a whole row, so only the latest of each counts: the board holds one row per
gateway, by host and profile, as two hosts may both have a ``coder`` (its size is the fleet's) and a pipe whose readable end wakes the showing thread.
A second pipe, written once and never read, stops every watch at once.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

Key = tuple[str, str]  # a row's host and profile


class Board:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[Key, dict[str, Any]] = {}
        self._changed: dict[Key, dict[str, Any]] = {}
        self._wake_read, self._wake_write = os.pipe()
        self._stop_read, self._stop_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)

    @property
    def wake_fd(self) -> int:
        """Readable while rows changed that ``take`` has not given yet."""
        return self._wake_read

    @property
    def stop_fd(self) -> int:
        """Readable once the view stops."""
        return self._stop_read

    def report(self, row: Mapping[str, Any]) -> None:
        with self._lock:
            key = (row["host"], row["profile"])
            self._rows[key] = dict(row)
            self._changed[key] = dict(row)
        try:
            os.write(self._wake_write, b".")
        except BlockingIOError:
            pass  # the pipe is full: the reader has been woken already

    def take(self) -> tuple[dict[Key, dict[str, Any]], list[dict[str, Any]]]:
        """Every row, and the rows that changed since the last call."""
        try:
            while os.read(self._wake_read, 4096):
                pass
        except BlockingIOError:
            pass
        with self._lock:
            changed, self._changed = list(self._changed.values()), {}
            return dict(self._rows), changed

    def stop(self) -> None:
        os.write(self._stop_write, b".")

    def close(self) -> None:
        for fd in (self._wake_read, self._wake_write, self._stop_read, self._stop_write):
            os.close(fd)
