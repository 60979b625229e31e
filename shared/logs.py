"""How a mesh process logs: one line a record on stderr, named by process and pid, at the
level ``HERMES_LOG_LEVEL`` names (default INFO).

A bad level never stops a process: it logs at INFO and says so.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

LEVEL_ENV = "HERMES_LOG_LEVEL"
DEFAULT_LEVEL = logging.INFO
# One line per HTTP request is noise; workers log failures themselves, never a token.
QUIET_LIBRARIES = ("httpx", "httpcore")


def parse_level(value: str | None) -> int | None:
    """The level ``value`` names: a level name in any case (``debug``) or a number; None if neither."""
    if value is None:
        return None
    word = value.strip()
    if word.isdigit():
        return int(word)
    return logging.getLevelNamesMapping().get(word.upper())


def configure(process_name: str, env: Mapping[str, str] | None = None) -> None:
    """Log this process's records as ``<time> <process_name>[<pid>] <LEVEL> <message>``."""
    raw = (os.environ if env is None else env).get(LEVEL_ENV)
    level = parse_level(raw)
    logging.basicConfig(
        level=DEFAULT_LEVEL if level is None else level,
        format=f"%(asctime)s {process_name}[%(process)d] %(levelname)s %(message)s",
    )
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING)
    if raw is not None and level is None:
        logging.getLogger(__name__).warning("%s=%r is not a log level; logging at INFO", LEVEL_ENV, raw)
