"""How a mesh process logs: one record a line on stderr, at the level ``HERMES_LOG_LEVEL``
names (default INFO), in the form ``HERMES_LOG_FORMAT`` names:

- ``text`` (the default): ``<time> <service>[<pid>] <LEVEL> <message>``;
- ``json``: one JSON object a line (``shared.log_record``: time, level, logger, message,
  service, pid, instance id, profile, update id, exception).

Under systemd, when stderr is the journal (``JOURNAL_STREAM``), records go to the journal's
native socket instead, with the same fields as journal fields (``shared.journal``), whatever
the format. Secrets are hidden in every form. A bad level or format never stops a process: it
logs at INFO, or in text, and says so.

A process says what it runs for (an updater its update id, at ``configure``; a gateway its
profile, once it knows it: ``bind_profile``); an activity of a process that serves several profiles says its own (``set_activity``).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from shared import ids
from shared.journal import JournalHandler, stderr_is_journal
from shared.log_record import BOUND, FORMAT_ENV, JSON, TEXT, json_line, parse_format, record_fields
from shared.redaction import redact_text

LEVEL_ENV = "HERMES_LOG_LEVEL"
DEFAULT_LEVEL = logging.INFO
# One line per HTTP request is noise; workers log failures themselves, never a token.
QUIET_LIBRARIES = ("httpx", "httpcore")

Activity = Callable[[], Mapping[str, str | None]]

_service = "hermes"
_bound: dict[str, str | None] = {}
_activity: Activity | None = None


def parse_level(value: str | None) -> int | None:
    """The level ``value`` names: a level name in any case (``debug``) or a number; None if neither."""
    if value is None:
        return None
    word = value.strip()
    if word.isdigit():
        return int(word)
    return logging.getLevelNamesMapping().get(word.upper())


def bind_profile(profile: str | None) -> None:
    """Say, for every record of this process from now on, which profile it runs for."""
    _bound["profile"] = profile


def set_activity(activity: Activity | None) -> None:
    """Have each record ask ``activity`` what the running activity is for; what it names wins
    over what the process bound."""
    global _activity
    _activity = activity


def current() -> dict[str, str | None]:
    """What a record logged now is for: the process's bound fields, the activity's over them."""
    fields = dict(_bound)
    if _activity is not None:
        fields.update({k: v for k, v in _activity().items() if v is not None and k in BOUND})
    return fields


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    return record_fields(record, _service, ids.instance_id(), current())


class _Stderr(logging.StreamHandler):
    """stderr, one record a line in ``form``, secrets hidden."""

    def __init__(self, form: str, service: str) -> None:
        super().__init__(sys.stderr)
        self.form = form
        self.text = logging.Formatter(f"%(asctime)s {service}[%(process)d] %(levelname)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        if self.form == JSON:
            return json_line(fields_of(record))
        return redact_text(self.text.format(record))


def configure(
    process_name: str, env: Mapping[str, str] | None = None, *, update_id: str | None = None, profile: str | None = None
) -> None:
    """Log this process's records as the module says, as service ``process_name``. A second
    call (a forked gateway, after its fork server's) replaces the first's set-up whole."""
    global _service, _activity
    env = os.environ if env is None else env
    _service, _activity = process_name, None
    _bound.clear()
    _bound.update(profile=profile, update_id=update_id)
    raw_level, raw_format = env.get(LEVEL_ENV), env.get(FORMAT_ENV)
    level, form = parse_level(raw_level), parse_format(raw_format)
    stderr = _Stderr(form or TEXT, process_name)
    handler: logging.Handler = JournalHandler(fields_of, stderr) if stderr_is_journal(env) else stderr
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, (_Stderr, JournalHandler))]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(DEFAULT_LEVEL if level is None else level)
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING)
    log = logging.getLogger(__name__)
    if raw_level is not None and level is None:
        log.warning("%s=%r is not a log level; logging at INFO", LEVEL_ENV, raw_level)
    if raw_format is not None and form is None:
        log.warning("%s=%r is not a log format (text, json); logging in text", FORMAT_ENV, raw_format)
