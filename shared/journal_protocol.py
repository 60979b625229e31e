"""The journal's native protocol, as bytes: how a record's fields become one datagram for
``/run/systemd/journal/socket``, and how a process knows its stderr is the journal. No I/O.

A datagram is a run of fields. A value without a line break is ``NAME=value\\n``; one with a
line break (a traceback) is ``NAME\\n``, its length as 64-bit little-endian, the value, ``\\n``.
A name is upper-case letters, digits and ``_``, not starting with ``_`` (the journal's own
trusted fields) or a digit, at most 64 characters.

systemd sets ``JOURNAL_STREAM=<device>:<inode>`` for a service whose stdout or stderr it
connected to the journal; only when stderr is that very file is the journal ours to write to
(a child with its stderr sent elsewhere inherits the variable, not the stream).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from shared.log_record import priority

SOCKET = "/run/systemd/journal/socket"
STREAM_ENV = "JOURNAL_STREAM"
_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,63}")


# Not a HermesError: a field name is ours, never a user's input; a bad one is a bug here.
class BadFieldName(ValueError):
    pass


def entry(fields: Mapping[str, Any], record: logging.LogRecord) -> list[tuple[str, str]]:
    """The journal's fields for a record whose ``fields`` are ``shared.log_record``'s (already
    redacted): the message with its traceback, the syslog priority, who logged it and where."""
    message = fields["message"] + (f"\n{fields['exception']}" if fields.get("exception") else "")
    named = [
        ("MESSAGE", message),
        ("PRIORITY", str(priority(record.levelno))),
        ("SYSLOG_IDENTIFIER", f"hermes-{fields['service']}"),
        ("HERMES_SERVICE", fields["service"]),
        ("HERMES_INSTANCE_ID", fields["instance_id"]),
        ("HERMES_PROFILE", fields["profile"]),
        ("HERMES_UPDATE_ID", fields["update_id"]),
        ("HERMES_LOGGER", fields["logger"]),
        ("CODE_FILE", record.pathname),
        ("CODE_LINE", str(record.lineno)),
        ("CODE_FUNC", record.funcName),
    ]
    return [(name, str(value)) for name, value in named if value is not None and value != ""]


def encode(fields: Iterable[tuple[str, str]]) -> bytes:
    """One datagram of ``fields`` (name, value), in order."""
    out = bytearray()
    for name, value in fields:
        if not _NAME.fullmatch(name):
            raise BadFieldName(f"not a journal field name: {name!r}")
        data = value.encode("utf-8", "replace")
        if b"\n" in data:
            out += name.encode() + b"\n" + len(data).to_bytes(8, "little") + data + b"\n"
        else:
            out += name.encode() + b"=" + data + b"\n"
    return bytes(out)


def is_journal_stream(value: str | None, device: int, inode: int) -> bool:
    """Whether ``JOURNAL_STREAM``'s ``value`` names the file (``device``, ``inode``) stderr is."""
    if not value:
        return False
    dev, sep, ino = value.strip().partition(":")
    if not (sep and dev.isdigit() and ino.isdigit()):
        return False
    return (int(dev), int(ino)) == (device, inode)
