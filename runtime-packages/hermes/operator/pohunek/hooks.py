"""The lifecycle hooks of a managed Hermes session, each one report through ``shared.hooks``
where this project's packages import, else through ``hook_wire``: the same frame over the same
intake, with the standard library alone. Both are in process (a hook starts no process, so the
operator CLI is no way for it), both bounded and silent on failure.

Hermes passes a hook its ``session_id`` and payload keywords (what the user typed, the
history, the model); only ``session_id`` and ``resumed`` are read, the rest is never looked
at, so nothing of it can reach a report. A hook never raises: whatever goes wrong is counted
and swallowed, and a Hermes turn goes on. Outside a managed session ``shared.hooks`` sends
nothing and returns at once.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from . import contract


def _reports() -> ModuleType:
    try:
        from shared import hooks
    except ImportError:
        from . import hook_wire

        return hook_wire
    return hooks


reports = _reports()
_ID = re.compile(contract.ID_PATTERN)

MAX_COUNT = 1_000_000

_lock = threading.Lock()
_counts = {"calls": 0, "failures": 0}
_last_session: str | None = None  # the Hermes session id seen last


def counters() -> dict[str, int]:
    """How many hook calls ran, and how many failed (a report not sent while managed, or an
    exception); each capped at ``MAX_COUNT``."""
    with _lock:
        return dict(_counts)


def _count(name: str) -> None:
    with _lock:
        _counts[name] = min(_counts[name] + 1, MAX_COUNT)


def _report(send: Callable[[], object]) -> bool:
    """Run one report; whether it was sent. Not sent while managed is a failure."""
    # Read from the client's counts: a claim returns nothing, and a False alone cannot tell
    # "unmanaged" from a failure.
    before = reports.counters()
    send()
    after = reports.counters()
    sent = after["sent"] > before["sent"]
    if not sent and after["unmanaged"] == before["unmanaged"]:
        _count("failures")
    return sent


def _session_id(kwargs: dict[str, Any]) -> str | None:
    value = kwargs.get("session_id")
    return value if type(value) is str and _ID.fullmatch(value) else None


def _on_session_start(kwargs: dict[str, Any]) -> None:
    global _last_session
    session = _session_id(kwargs)
    if session is not None:
        resumed = bool(kwargs.get("resumed"))
        _report(lambda: reports.claim_native_id(session, resumed=resumed))
        _last_session = session


def _pre_llm_call(kwargs: dict[str, Any]) -> None:
    global _last_session
    session = _session_id(kwargs)
    # Compaction continues the chat under a new id. Remembered once reported, so a report
    # not taken is tried again on the next call.
    if session is not None and session != _last_session:
        if _report(lambda: reports.report_continuation([session])):
            _last_session = session
    _report(lambda: reports.report_activity("working"))


def _post_llm_call(kwargs: dict[str, Any]) -> None:
    _report(lambda: reports.report_activity("idle"))


def _pre_approval_request(kwargs: dict[str, Any]) -> None:
    _report(lambda: reports.report_attention("owner_approval"))


def _post_approval_response(kwargs: dict[str, Any]) -> None:
    _report(lambda: reports.report_activity("working"))


def _on_session_end(kwargs: dict[str, Any]) -> None:
    """Nothing: the session ended, but the process may run on (finalize releases)."""


def _on_session_finalize(kwargs: dict[str, Any]) -> None:
    _report(lambda: reports.report_release("session_end"))


def _guarded(body: Callable[[dict[str, Any]], None]) -> Callable[..., None]:
    def hook(*_args: Any, **kwargs: Any) -> None:
        _count("calls")
        try:
            body(kwargs)
        except Exception:
            _count("failures")

    return hook


def callbacks() -> dict[str, Callable[..., None]]:
    """The seven Hermes hooks by name."""
    return {
        "on_session_start": _guarded(_on_session_start),
        "pre_llm_call": _guarded(_pre_llm_call),
        "post_llm_call": _guarded(_post_llm_call),
        "pre_approval_request": _guarded(_pre_approval_request),
        "post_approval_response": _guarded(_post_approval_response),
        "on_session_end": _guarded(_on_session_end),
        "on_session_finalize": _guarded(_on_session_finalize),
    }
