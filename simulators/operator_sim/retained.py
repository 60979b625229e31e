"""The bounded output of one runtime: the newest ``limit`` bytes, addressed by stream offset.

Offsets count every byte the runtime ever wrote, from 0. Evicted bytes are gone; a reader whose
cursor fell behind is told so with a ``gap`` instead of being handed later bytes silently.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.operator.protocol import Code, OperatorError


class CursorAhead(OperatorError):
    code = Code.INVALID_OUTPUT_CURSOR


@dataclass(frozen=True)
class Page:
    start: int
    next: int
    data: bytes
    gap: tuple[int, int] | None  # [requested, history_start): bytes the reader will never see
    has_more: bool


class Retained:
    def __init__(self, limit: int) -> None:
        self._buffer = bytearray()
        self._start = 0  # the offset of _buffer[0]
        self._limit = _positive(limit)

    @property
    def history_start(self) -> int:
        return self._start

    @property
    def end(self) -> int:
        return self._start + len(self._buffer)

    @property
    def limit(self) -> int:
        return self._limit

    def append(self, data: bytes) -> None:
        if len(data) >= self._limit:
            # Replace rather than grow: memory never exceeds the limit, even for one huge write.
            self._start = self.end + len(data) - self._limit
            self._buffer = bytearray(data[len(data) - self._limit :])
            return
        self._buffer += data
        self._evict()

    def set_limit(self, limit: int) -> None:
        self._limit = _positive(limit)
        self._evict()

    def read(self, after: int | None, max_bytes: int) -> Page:
        """Up to ``max_bytes`` from ``after`` (the newest tail when None); see the module docstring."""
        _positive(max_bytes)
        gap = None
        if after is None:
            start = max(self._start, self.end - max_bytes)
        elif after < 0:
            raise ValueError(f"negative cursor: {after}")
        elif after > self.end:
            raise CursorAhead(
                "the output cursor is beyond the end of this runtime's output",
                detail={"after_offset": str(after), "runtime_end_offset": str(self.end)},
            )
        elif after < self._start:
            gap = (after, self._start)
            start = self._start
        else:
            start = after
        index = start - self._start
        data = bytes(self._buffer[index : index + max_bytes])
        following = start + len(data)
        return Page(start=start, next=following, data=data, gap=gap, has_more=following < self.end)

    def _evict(self) -> None:
        excess = len(self._buffer) - self._limit
        if excess > 0:
            del self._buffer[:excess]
            self._start += excess


def _positive(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"must be a positive int: {value!r}")
    return value
