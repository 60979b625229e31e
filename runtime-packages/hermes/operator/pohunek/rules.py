"""The tools' rules, apart from any I/O: which host, which session, which project, the origin
guard, how a start is recognised again, how text and results are bounded, and what each daemon
answer means to the model. Nothing here reads a clock or a socket; callers pass what they saw.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import contract as c
from .errors import ToolError, error, ok
from .hosts import LOCAL, host_allowed

# The policy as the tools read it: ``shared.operator.policy.Policy`` or the plugin's own copy
# of its fields (``settings.Settings``), which have the same names.
Policy = Any

MAX_LIST = 100
LIVE_STATES = frozenset({"starting", "running"})
TERMINAL_STATES = frozenset({"stopped", "done", "failed"})
TIMEOUT_NOTE = "a timeout is no change, not health or idle"
GAP_ACTION = "discard cursor; read a fresh screen or the newest tail"

# The tools that change a session, by the daemon method the origin guard names.
GUARDED: dict[str, str] = {
    "pohunek_session_send": "input",
    "pohunek_session_resume": "resume",
    "pohunek_session_fork": "fork",
    "pohunek_session_resize": "resize",
    "pohunek_session_rename": "rename",
    "pohunek_session_set_metadata": "set_metadata",
    "pohunek_session_stop": "stop",
    "pohunek_session_remove": "remove",
}
assert set(GUARDED.values()) == c.ORIGIN_DENIED


# --- hosts and the origin -----------------------------------------------------------------


def choose_host(policy: Policy, host: str | None) -> str:
    """The host a call targets: the one asked for, else ``local``; either must be allowed."""
    chosen = LOCAL if host is None else host
    if not host_allowed(policy.allowed_hosts, chosen):
        raise error("plugin_host_denied", {"host": chosen} if host is not None else None)
    return chosen


@dataclass(frozen=True)
class Origin:
    """The managed session this plugin runs inside, as the daemon that started it said."""

    session_id: str
    daemon_id: str

    def markers(self) -> dict[str, str]:
        return {"origin_session_id": self.session_id, "origin_daemon_id": self.daemon_id}


def origin_from_env(env: Mapping[str, str]) -> Origin | None:
    """Both markers, or no origin at all: half an origin names nothing the daemon can match."""
    session_id, daemon_id = env.get(c.SESSION_ENV, ""), env.get(c.DAEMON_ID_ENV, "")
    if not session_id or not daemon_id:
        return None
    return Origin(session_id, daemon_id)


def guard(tool: str, origin: Origin | None, target: str) -> None:
    """Refuse a change aimed at the origin session; run on the reference as asked and again
    on the id it resolved to, before any change is sent."""
    if tool in GUARDED and origin is not None and target == origin.session_id:
        raise error("plugin_self_target_denied", {"method": GUARDED[tool]})


# --- what a reference, a project and an agent resolve to ----------------------------------


def resolve(ref: str, sessions: list[dict[str, Any]]) -> dict[str, Any]:
    """The one summary ``ref`` names: its exact id first, else its exact, unique name."""
    by_id = [s for s in sessions if s.get("id") == ref]
    if by_id:
        return by_id[0]
    named = [s for s in sessions if s.get("name") == ref]
    if len(named) > 1:
        raise error("plugin_ambiguous_session", {"ids": sorted(str(s.get("id")) for s in named)[:MAX_LIST]})
    if not named:
        raise error("plugin_session_not_found")
    return named[0]


def resolve_project(ref: Mapping[str, str], projects: list[dict[str, Any]]) -> dict[str, Any]:
    """The one project ``{id}`` or ``{label}`` names in ``project.list``."""
    key = "id" if "id" in ref else "label"
    found = [pr for pr in projects if pr.get(key) == ref[key]]
    if len(found) > 1:
        raise error("plugin_ambiguous_project", {"matches": len(found)})
    if not found:
        raise error("plugin_project_not_found")
    return found[0]


def daemon_project(project: Mapping[str, Any], projects: list[dict[str, Any]]) -> str:
    """How ``session.new`` names the resolved project: its id, unless another project shares
    it (two labels of one repository); then its label, which resolved it uniquely."""
    shared = sum(1 for pr in projects if pr.get("id") == project["id"])
    return str(project["id"] if shared == 1 else project["label"])


def check_agent(agent: str, inspected: Mapping[str, Any]) -> None:
    supported = inspected.get("supported_agents")
    if not isinstance(supported, list) or agent not in supported:
        raise error("plugin_agent_denied", {"supported": [a for a in supported or [] if isinstance(a, str)][:16]})


def check_u64(args: Mapping[str, Any], *fields: str) -> None:
    """The schema checks the spelling; the range needs the number."""
    for field in fields:
        if field in args and int(args[field]) > c.U64_MAX:
            raise error("plugin_invalid_request", {"field": field})


def runtime_of(session: Mapping[str, Any]) -> dict[str, str]:
    """The pair naming the session's current runtime, as its summary says."""
    runtime = session.get("runtime")
    if not isinstance(runtime, dict):
        return {}
    return {k: runtime[k] for k in ("worker_instance_id", "runtime_generation") if isinstance(runtime.get(k), str)}


def check_runtime(args: Mapping[str, Any], session: Mapping[str, Any]) -> None:
    """A cursor is only valid with the runtime it came from: a pair naming another runtime
    than the session's current one is a runtime change, answered with the current pair so the
    model can start over on it."""
    if "worker_instance_id" not in args:
        return
    current = runtime_of(session)
    asked = {"worker_instance_id": args["worker_instance_id"], "runtime_generation": args["runtime_generation"]}
    if asked != current:
        raise error("session_runtime_changed", {"session_id": str(session.get("id")), **current})


def output_bytes(policy: Policy, asked: int | None) -> int:
    """How many output bytes one read asks for: the caller's bound, within the policy's."""
    if asked is None:
        return min(c.OUTPUT_MAX_BYTES, policy.max_output_bytes)
    if asked > policy.max_output_bytes:
        raise error("plugin_invalid_request", {"field": "max_bytes"})
    return asked


def check_text_bytes(text: str, field: str, limit: int) -> None:
    """The daemon's input limit is in bytes; a schema can only count characters."""
    if len(text.encode("utf-8")) > limit:
        raise error("plugin_invalid_request", {"field": field})


# --- text and result bounds ---------------------------------------------------------------


@dataclass(frozen=True)
class Clipped:
    text: str
    kept: int  # bytes of the input the text stands for
    truncated: bool
    utf8_replaced: bool


def clip(data: bytes, limit: int, *, more_follows: bool = False) -> Clipped:
    """``data`` cut to at most ``limit`` bytes, never inside a character, and decoded; invalid
    bytes are replaced and said so. When more follows, a character cut off at the end is left
    for the next read instead of being replaced."""
    truncated = len(data) > limit
    cut = min(len(data), limit)
    if truncated or more_follows:
        cut = _boundary(data, cut)
    kept = data[:cut]
    try:
        text, replaced = kept.decode("utf-8"), False
    except UnicodeDecodeError:
        text, replaced = kept.decode("utf-8", "replace"), True
    return Clipped(text, cut, truncated, replaced)


def _boundary(data: bytes, cut: int) -> int:
    """``cut``, moved back to the start of a character that would not fit whole."""
    for back in range(1, 4):
        start = cut - back
        if start < 0:
            break
        byte = data[start]
        if byte & 0xC0 != 0x80:  # not a continuation byte: the lead of the last character
            width = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4 if byte & 0xF8 == 0xF0 else 1
            return start if start + width > cut and start > 0 else cut
    return cut


def bounded_list(items: list[Any]) -> tuple[list[Any], bool]:
    return items[:MAX_LIST], len(items) > MAX_LIST


def fit(result: Any, max_output_bytes: int) -> str:
    """The answer the model gets, or ``plugin_output_limit_exceeded`` when it is too big."""
    answer = ok(result)
    if len(answer.encode("utf-8")) > max_output_bytes:
        raise error("plugin_output_limit_exceeded", {"limit": max_output_bytes})
    return answer


# --- waits and starts ---------------------------------------------------------------------

_CHANGED = frozenset({"output_advanced", "terminal_changed", "session_updated"})


def wait_outcome(reason: str, state: str | None) -> dict[str, str]:
    """What a wait means: a predicate matched, the runtime changed, the session ended,
    something changed, or nothing did by the deadline."""
    if reason == "runtime_changed":
        return {"outcome": "runtime_changed"}
    if reason in ("state_matched", "activity_matched"):
        return {"outcome": "matched"}
    if state in TERMINAL_STATES:
        return {"outcome": "terminal"}
    if reason in _CHANGED:
        return {"outcome": "changed"}
    if reason == "timeout":
        return {"outcome": "timeout", "note": TIMEOUT_NOTE}
    raise error("pohunek_cli_invalid_envelope")


@dataclass(frozen=True)
class StartRequest:
    name: str
    agent: str
    project_id: str
    branch: str | None


def start_match(entries: list[dict[str, Any]], request: StartRequest) -> dict[str, Any] | None:
    """The session a timed-out start created, once it is live; None while there is none yet
    or it is not live yet. A look-alike that differs is a conflict, never a match."""
    named = [e for e in entries if e.get("name") == request.name]
    if len(named) > 1:
        raise error("plugin_ambiguous_session", {"ids": sorted(str(e.get("id")) for e in named)[:MAX_LIST]})
    if not named:
        return None
    entry = named[0]
    expected = (request.agent, request.project_id, request.branch, False)
    found = (entry.get("agent"), entry.get("project_id"), entry.get("branch"), entry.get("external"))
    linked = request.branch is None or entry.get("is_linked_worktree") is True
    if found != expected or not linked or entry.get("state") not in LIVE_STATES:
        raise error("plugin_session_conflict", {"session_id": str(entry.get("id"))})
    runtime = entry.get("runtime")
    if isinstance(runtime, dict) and runtime.get("state") == "live" and runtime.get("worker_instance_id"):
        if runtime.get("runtime_generation"):
            return entry
    return None


# --- daemon answers -----------------------------------------------------------------------

_PASSED = frozenset(
    {
        "session_not_found",
        "session_terminal_unavailable",
        "session_runtime_changed",
        "invalid_output_cursor",
        "session_waiter_limit_reached",
        "agent_not_resumable",
        "agent_runtime_unsupported",
        "runtime_not_installed",
        "runtime_incompatible",
        "idempotency_conflict",
        "session_live",
        "session_remove_unconfirmed",
        "session_limit_reached",
        "session_no_repository",
        "daemon_failing",
        "host_unknown",
        "host_unreachable",
        "plugin_self_target_denied",
    }
)
_RENAMED = {
    c.SESSION_NOT_LIVE: "session_not_running",
    c.SESSION_AMBIGUOUS: "plugin_ambiguous_session",
    c.PROJECT_NOT_FOUND: "plugin_project_not_found",
    c.PROJECT_AMBIGUOUS: "plugin_ambiguous_project",
    c.AGENT_UNKNOWN: "plugin_agent_denied",
    c.PROTOCOL_INCOMPATIBLE: "pohunek_cli_incompatible",
    c.MALFORMED_REPLY: "pohunek_cli_invalid_envelope",
    c.UNAVAILABLE: "daemon_unreachable",
    c.CONNECTION_RESET: "daemon_unreachable",
    c.SHUTTING_DOWN: "daemon_unreachable",
}
_TIMEOUTS = frozenset({c.TIMEOUT, c.DEADLINE_EXCEEDED})
_INPUT_REFUSALS = frozenset({c.INVALID_FIELD, c.MISSING_FIELD, c.UNKNOWN_FIELD, "field_too_long"})
_CODE = re.compile(r"[a-z][a-z0-9_]{0,63}")


def daemon_failure(code: str, op: str, *, budget_spent: bool) -> ToolError:
    """The typed error one daemon (or transport) answer is to the model; none of its text."""
    if code in _TIMEOUTS:
        return error("plugin_tool_timeout" if budget_spent else "request_timeout")
    if code in _PASSED:
        return error(code)
    if code in _RENAMED:
        return error(_RENAMED[code])
    if op == "session.input" and code in _INPUT_REFUSALS:
        return error("session_input_rejected")
    return error("daemon_error", {"daemon_code": code if _CODE.fullmatch(code) else "unrecognised"})
