"""What a log record says, as fields: the one shape behind the JSON line on stderr and the
journal's entry, with every secret hidden. No I/O.

A record's fields are the time (RFC 3339, UTC), its level and logger, the message (its args
already put in), the process's own (``service``, ``pid``, ``instance_id``) and what the
process is doing (``profile``, ``update_id``: bound for the whole process, or for the activity
running now), and the exception's text when there is one. ``shared.redaction`` is applied to
all of them together: args, exception text and bound values included.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from shared.redaction import redact

FORMAT_ENV = "HERMES_LOG_FORMAT"
TEXT, JSON = "text", "json"
FORMATS = (TEXT, JSON)
# The fields every JSON line carries, present even when empty (null): a reader keys on them.
FIELDS = ("time", "level", "logger", "message", "service", "pid", "instance_id", "profile", "update_id")
# What a process or an activity may bind beside its service (``shared.logs.bind``).
BOUND = ("profile", "update_id")

# logging's levels as syslog's priorities, which the journal keeps (``PRIORITY=``).
_PRIORITIES = ((logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6))
DEBUG_PRIORITY = 7


def parse_format(value: str | None) -> str | None:
    """The format ``value`` names (``text`` or ``json``, any case); None if neither."""
    if value is None:
        return None
    word = value.strip().lower()
    return word if word in FORMATS else None


def priority(levelno: int) -> int:
    """The syslog priority of a logging level: the first at or below it, else debug."""
    return next((prio for level, prio in _PRIORITIES if levelno >= level), DEBUG_PRIORITY)


def rfc3339(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def record_fields(
    record: logging.LogRecord, service: str, instance_id: str, bound: Mapping[str, str | None]
) -> dict[str, Any]:
    """The fields of ``record`` from a process of ``service``, with ``bound`` (its profile and
    update id) over the defaults, every secret hidden."""
    fields: dict[str, Any] = {
        "time": rfc3339(record.created),
        "level": record.levelname,
        "logger": record.name,
        "message": record.getMessage(),
        "service": service,
        "pid": record.process,
        "instance_id": instance_id,
        **{name: bound.get(name) for name in BOUND},
    }
    exception = exception_text(record)
    if exception:
        fields["exception"] = exception
    return redact(fields)


def exception_text(record: logging.LogRecord) -> str:
    """The record's traceback and stack, as logging's own formatter writes them ("" if none)."""
    formatter = logging.Formatter()
    parts = []
    if record.exc_info:
        parts.append(formatter.formatException(record.exc_info))
    elif record.exc_text:
        parts.append(record.exc_text)
    if record.stack_info:
        parts.append(formatter.formatStack(record.stack_info))
    return "\n".join(parts)


def json_line(fields: Mapping[str, Any]) -> str:
    """One line: JSON escapes every line break a message or traceback holds."""
    return json.dumps(fields, ensure_ascii=False, default=str, separators=(",", ":"))
