"""How ``hermes logs gateway`` reads a log's lines and the journal's entries as records, and
prints them. No I/O.

A line that is a JSON record (``HERMES_LOG_FORMAT=json``) is that record; any other line is
``{"line": text}``. A journal entry our logging wrote (it has ``HERMES_SERVICE``) is the same
record again, from its fields; the journal's other entries (stderr lines, the manager's own
words about the unit) are ``{"line": MESSAGE}``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from shared.log_record import rfc3339

_LEVELS = {"0": "CRITICAL", "1": "CRITICAL", "2": "CRITICAL", "3": "ERROR", "4": "WARNING", "5": "INFO", "6": "INFO"}


def from_line(text: str) -> dict[str, Any]:
    text = text.rstrip("\n")
    if text.startswith("{"):
        try:
            record = json.loads(text)
        except ValueError:
            record = None
        if isinstance(record, dict) and "message" in record:
            return record
    return {"line": text}


def _text(value: Any) -> str:
    # journalctl writes a value that is not valid UTF-8 as a list of byte values.
    if isinstance(value, list):
        return bytes(v for v in value if isinstance(v, int) and 0 <= v < 256).decode("utf-8", "replace")
    return "" if value is None else str(value)


def from_journal(entry: dict[str, Any]) -> dict[str, Any]:
    message = _text(entry.get("MESSAGE"))
    if "HERMES_SERVICE" not in entry:
        return {"line": message}
    try:
        when = rfc3339(int(entry["__REALTIME_TIMESTAMP"]) / 1e6)
    except (KeyError, ValueError, TypeError):
        when = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    head, _, exception = message.partition("\nTraceback")  # the journal keeps them as one MESSAGE
    record: dict[str, Any] = {
        "time": when,
        "level": _LEVELS.get(_text(entry.get("PRIORITY")), "DEBUG"),
        "logger": _text(entry.get("HERMES_LOGGER")) or None,
        "message": head,
        "service": _text(entry["HERMES_SERVICE"]),
        "pid": int(_text(entry.get("_PID")) or 0) or None,
        "instance_id": _text(entry.get("HERMES_INSTANCE_ID")) or None,
        "profile": _text(entry.get("HERMES_PROFILE")) or None,
        "update_id": _text(entry.get("HERMES_UPDATE_ID")) or None,
    }
    if exception:
        record["exception"] = "Traceback" + exception
    return record


def belongs(record: dict[str, Any], profile: str, *, shared: bool) -> bool:
    """Whether ``record`` is ``profile``'s: every line of its own log; in a shared log, only a
    record that names it."""
    return not shared or record.get("profile") == profile


def render(record: dict[str, Any]) -> str:
    """A record as a text line, as the text format writes one (a line as it was)."""
    if "line" in record:
        return str(record["line"])
    line = f"{record.get('time')} {record.get('service')}[{record.get('pid')}] {record.get('level')} {record.get('message')}"
    return f"{line}\n{record['exception']}" if record.get("exception") else line
