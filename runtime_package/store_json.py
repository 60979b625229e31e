"""The registry's owner-private JSON files: a strict parse, canonical bytes, a safe bounded read.

Every file the registry keeps (``registry.json``, ``catalog-state.json``, each root's
``manifest.json``) is canonical JSON (sorted keys, no whitespace) of mode 0600. Reading one
refuses a symlink, a FIFO, a hard-linked or foreign-owned file and anything oversized before
a byte is parsed; the parse refuses duplicate keys, floats and non-standard constants.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

PRIVATE_FILE_MODE = 0o600


# Not a HermesError: only carries a reason to the registry's readers, which raise the typed error.
class FileRefused(Exception):
    """Internal: why a private file was not read; callers turn ``reason`` into their typed error."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii")


def strict_loads(raw: bytes) -> Any:
    """The JSON value of ``raw``; FileRefused("malformed") on anything but strict, standard JSON."""
    try:
        return json.loads(
            raw.decode("utf-8"),
            object_pairs_hook=_no_duplicates,
            parse_float=_refuse,
            parse_constant=_refuse,
        )
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise FileRefused("malformed") from None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key")
    return out


def _refuse(_text: str) -> Any:
    raise ValueError("not an integer JSON value")


def read_private(path: Path | str, *, limit: int, dir_fd: int | None = None) -> bytes | None:
    """The bytes of an owner-private file, or None when it does not exist.

    Refuses (FileRefused) a non-regular file, another owner, a mode other than 0600, a hard
    link, or more than ``limit`` bytes.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError:
        # ELOOP is a symlink; ENXIO a socket; anything else is no readable file either.
        raise FileRefused("not_regular") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileRefused("not_regular")
        if st.st_uid != os.geteuid():
            raise FileRefused("foreign_owner")
        if stat.S_IMODE(st.st_mode) != PRIVATE_FILE_MODE:
            raise FileRefused("unsafe_mode")
        if st.st_nlink != 1:
            raise FileRefused("hard_link")
        if st.st_size > limit:
            raise FileRefused("oversized")
        return read_fd(fd, limit)
    finally:
        os.close(fd)


def read_fd(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes of ``fd``; FileRefused("oversized") if it holds more (it may grow)."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, min(1 << 20, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise FileRefused("oversized")
