"""A hook report as its receiver reads it: one msgpack frame in, a checked ``Report`` out.

The hook reporter parses every frame on its intake with ``parse_report``, and
``hermes operator doctor`` passes its dry-run report through the same check. Reports are
payload-free by construction: every field is one of ``shared.hook_vocabulary``'s words, and a
frame with any other key is refused. The wire shape is what ``shared.hooks`` sends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared import hook_vocabulary as vocabulary
from shared import protocol
from shared.hook_vocabulary import HookReportError
from shared.protocol import ProtocolError


class ReportRefused(HookReportError):
    code = "report_refused"

    def __init__(self, reason: str, message: str):
        super().__init__(message, detail={"reason": reason})
        self.reason = reason


@dataclass(frozen=True)
class Launch:
    """What the launcher froze for the session's PTY root, as the report carried it."""

    exe: str | None
    script: str | None
    root_pid: int | None


@dataclass(frozen=True)
class Report:
    kind: str
    session: str
    pid: int
    start_time: int
    at: float
    fields: dict[str, Any] = field(default_factory=dict)
    launch: Launch | None = None

    def to_wire(self) -> dict[str, Any]:
        """What is forwarded to the daemon (the launch claim stays here: the reporter judged it)."""
        return {
            "kind": self.kind,
            "session": self.session,
            "pid": self.pid,
            "start_time": self.start_time,
            "at": self.at,
            **self.fields,
        }


def parse_report(raw: bytes) -> Report:
    """``raw`` as a ``Report``; ``ReportRefused`` (reason ``malformed``) for anything else."""
    if len(raw) > vocabulary.MAX_REPORT_BYTES:
        raise ReportRefused("malformed", f"a report of {len(raw)} bytes is over {vocabulary.MAX_REPORT_BYTES}")
    try:
        frame = protocol.unpack(raw, max_bytes=vocabulary.MAX_REPORT_BYTES)
    except ProtocolError as exc:
        raise ReportRefused("malformed", f"not a report frame: {exc.message}") from None
    if not isinstance(frame, dict):
        raise ReportRefused("malformed", "a report must be a map")
    if frame.get("v") != vocabulary.VERSION:
        raise ReportRefused("malformed", f"report version {frame.get('v')!r} is not {vocabulary.VERSION}")
    kind = frame.get("kind")
    if not isinstance(kind, str) or kind not in _KINDS:
        raise ReportRefused("malformed", f"unknown report kind {kind!r}")
    session = _id("session", frame.get("session"))
    pid, start_time, at = (frame.get(k) for k in ("pid", "start_time", "at"))
    if type(pid) is not int or pid <= 0 or type(start_time) is not int or start_time < 0:
        raise ReportRefused("malformed", "a report needs a positive pid and a start time")
    if isinstance(at, bool) or not isinstance(at, (int, float)):
        raise ReportRefused("malformed", "a report needs a time")
    body = {k: v for k, v in frame.items() if k not in vocabulary.ENVELOPE}
    fields, launch = _KINDS[kind](body)
    return Report(kind, session, pid, start_time, float(at), fields, launch)


def _exactly(body: dict[str, Any], keys: set[str]) -> None:
    if set(body) != keys:
        raise ReportRefused("malformed", f"a report of this kind carries exactly {sorted(keys)}")


def _id(name: str, value: Any) -> str:
    if not vocabulary.is_id(value):
        raise ReportRefused("malformed", f"{name} is not an id")
    return value


def _choice(name: str, value: Any, choices: frozenset[str]) -> str:
    if not vocabulary.is_one_of(value, choices):
        raise ReportRefused("malformed", f"{name} must be one of {sorted(choices)}")
    return value


def _native_id(body: dict[str, Any]) -> tuple[dict[str, Any], Launch]:
    _exactly(body, {"native_id", "resumed", "launch"})
    if not isinstance(body["resumed"], bool):
        raise ReportRefused("malformed", "resumed must be true or false")
    claim = body["launch"]
    if not isinstance(claim, dict) or set(claim) != vocabulary.LAUNCH_KEYS:
        raise ReportRefused("malformed", "a native id report carries the launch claim")
    exe, script, root_pid = claim["exe"], claim["script"], claim["root_pid"]
    for name, value in (("exe", exe), ("script", script)):
        if value is not None and (
            not isinstance(value, str) or not value.startswith("/") or len(value) > vocabulary.MAX_LAUNCH_PATH
        ):
            raise ReportRefused("malformed", f"launch {name} must be an absolute path")
    if root_pid is not None and (type(root_pid) is not int or root_pid <= 0):
        raise ReportRefused("malformed", "launch root_pid must be a pid")
    return {"native_id": _id("native_id", body["native_id"]), "resumed": body["resumed"]}, Launch(exe, script, root_pid)


def _continuation(body: dict[str, Any]) -> tuple[dict[str, Any], None]:
    _exactly(body, {"continuation_ids"})
    ids = body["continuation_ids"]
    if not isinstance(ids, list) or not 1 <= len(ids) <= vocabulary.MAX_CONTINUATION_IDS:
        raise ReportRefused("malformed", f"continuation_ids must be 1 to {vocabulary.MAX_CONTINUATION_IDS} ids")
    return {"continuation_ids": [_id("continuation id", i) for i in ids]}, None


def _activity(body: dict[str, Any]) -> tuple[dict[str, Any], None]:
    _exactly(body, {"state"})
    return {"state": _choice("state", body["state"], vocabulary.ACTIVITY_STATES)}, None


def _attention(body: dict[str, Any]) -> tuple[dict[str, Any], None]:
    _exactly(body, {"reason"})
    return {"reason": _choice("reason", body["reason"], vocabulary.ATTENTION_REASONS)}, None


def _release(body: dict[str, Any]) -> tuple[dict[str, Any], None]:
    _exactly(body, {"reason"})
    return {"reason": _choice("reason", body["reason"], vocabulary.RELEASE_REASONS)}, None


_KINDS = {
    "native_id": _native_id,
    "continuation": _continuation,
    "activity": _activity,
    "attention": _attention,
    "release": _release,
}
