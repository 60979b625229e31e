"""What the CLI does with an error nobody expected: one line for the user, the detail in a log.

The line names the command and what failed in plain words (never an exception's class name)
and where the detail went: ``<root home>/logs/cli-errors.log``, newest entry last, redacted,
kept under ``MAX_LOG_BYTES`` by dropping the oldest entries, and replaced atomically under a
lock so that two failing commands never interleave. ``HERMES_DEBUG=1`` also prints the
traceback on stderr. A log that cannot be written is said so in the line, and the command still
ends with exit 1.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Mapping
from pathlib import Path

from hermes_cli.errors import CliError
from shared import files, homes
from shared.errors import HermesError
from shared.redaction import redact_text

DEBUG_ENV = "HERMES_DEBUG"
LOG_FILE = "logs/cli-errors.log"
MAX_LOG_BYTES = 256 * 1024
ENTRY_START = "=== "  # the first characters of every entry's header line
LOCK_TIMEOUT = 2.0  # a crash report never waits long on another one


class UnexpectedError(CliError):
    """The typed form of an unexpected failure: what ``--json`` prints, with the stable code
    every error starts from (``internal_error``)."""


def debug_wanted(env: Mapping[str, str] | None = None) -> bool:
    value = (os.environ if env is None else env).get(DEBUG_ENV, "")
    return value.strip().lower() in ("1", "true", "yes", "on")


def describe(exc: BaseException) -> str:
    """What failed, in words: an OS error's own description and path, else a plain phrase."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror.lower()}{where}"
    return "an internal error"


def report(command: str, exc: BaseException) -> UnexpectedError:
    """Log ``exc`` and return the one-line error the CLI prints for it."""
    detail = redact_text("".join(traceback.format_exception(exc)))
    if debug_wanted():
        sys.stderr.write(detail)
    try:
        where = f"details in {save(homes.root_home(), command, detail)}"
    except (OSError, HermesError) as log_exc:
        where = f"details not saved: {describe(log_exc)}; {DEBUG_ENV}=1 shows them"
    return UnexpectedError(f"{command} failed: {describe(exc)} ({where})", detail={"command": command})


def save(root: Path, command: str, detail: str) -> Path:
    """Append an entry to ``root``'s CLI error log, keeping it under ``MAX_LOG_BYTES``."""
    path = homes.ensure_home(root) / LOG_FILE
    path.parent.mkdir(mode=homes.RUN_DIR_MODE, exist_ok=True)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    entry = f"{ENTRY_START}{stamp} pid {os.getpid()} hermes {command}\n{detail.rstrip()}\n".encode()
    with files.locked(path, timeout=LOCK_TIMEOUT):
        text = _tail(path) + entry
        files.write_bytes_atomic(path, _bounded(text), mode=0o600)
    return path


def _tail(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - MAX_LOG_BYTES))
            return f.read(MAX_LOG_BYTES)
    except FileNotFoundError:
        return b""


def _bounded(text: bytes) -> bytes:
    """``text`` cut to its newest entries that fit (the newest one alone is cut to its end)."""
    if len(text) <= MAX_LOG_BYTES:
        return text
    kept = text[-MAX_LOG_BYTES:]
    start = kept.find(b"\n" + ENTRY_START.encode())
    return kept[start + 1 :] if start >= 0 else kept
