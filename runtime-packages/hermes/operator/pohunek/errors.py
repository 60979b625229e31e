"""The closed set of answers a tool gives the model, each with a fixed recovery hint.

Messages and hints are ours and carry no payload: no daemon exception text, no argument
values. A daemon code outside this set reaches the model as ``daemon_error`` with the code in
``detail.daemon_code``, so the set stays closed.
"""

from __future__ import annotations

import json
from typing import Any

_REREAD = "discard cursors; read a fresh screen or the newest tail"
_RELIST = "list sessions again and use the exact id"

RECOVER: dict[str, str] = {
    # The plugin's own refusals.
    "plugin_invalid_request": "fix the argument named in detail.field and call again",
    "plugin_host_denied": "use a host the policy lists (pohunek_hosts)",
    "plugin_self_target_denied": "this session hosts you: act on another session, or ask the human",
    "plugin_session_not_found": _RELIST,
    "plugin_ambiguous_session": "several sessions carry that name: use the exact id",
    "plugin_session_conflict": "a session of that name exists with other settings: choose another name",
    "plugin_project_not_found": "check the project id or label against the host's projects",
    "plugin_ambiguous_project": "several projects match: use the project id",
    "plugin_agent_denied": "use an agent profile the host supports",
    "plugin_busy": "too many tool calls at once: call again after one finishes",
    "plugin_tool_timeout": "the call ran out of time: read the session before retrying",
    "plugin_output_limit_exceeded": "ask for less: a smaller max_bytes or a filter",
    "internal_error": "report the failure to the human; do not retry blindly",
    # Transport and compatibility.
    "request_timeout": "do not start again: list sessions by name to find the start",
    "pohunek_cli_incompatible": "the daemon speaks another protocol: ask the human to update the integration",
    "pohunek_cli_invalid_envelope": "the daemon answered something unexpected: ask the human to check it",
    "pohunek_cli_unavailable": "the operator CLI cannot be run: ask the human to run `hermes operator doctor`",
    "pohunek_cli_failed": "the operator CLI failed: ask the human to run `hermes operator doctor`",
    "plugin_policy_invalid": "the plugin's policy no longer loads: ask the human to run `hermes operator doctor`",
    "daemon_unreachable": "the session daemon is not running: ask the human to start it",
    "host_unreachable": "the host does not answer now: try later or use another host",
    "host_unknown": "the daemon does not know that host: use one it lists",
    # The daemon's answers, passed through.
    "session_not_found": _RELIST,
    "session_not_running": "the session has no live runtime: resume it or start another",
    "session_terminal_unavailable": "the session has no terminal now: read its state instead",
    "session_runtime_changed": _REREAD,
    "invalid_output_cursor": _REREAD,
    "session_waiter_limit_reached": "too many waits on this session: wait again later",
    "session_input_rejected": "the daemon refused that input: send shorter plain text",
    "agent_not_resumable": "the session cannot be resumed: start a new one",
    "agent_runtime_unsupported": "the agent's installed version is not supported: ask the human",
    "runtime_not_installed": "the agent's runtime is not installed on the host: ask the human",
    "runtime_incompatible": "the agent's runtime does not match the daemon: ask the human",
    "idempotency_conflict": "read the session's state before trying the change again",
    "session_live": "the session is running: stop it first, or leave it as it is",
    "session_remove_unconfirmed": "removing would lose work in its worktree: ask the human",
    "session_limit_reached": "the host holds all the sessions it may: remove one first",
    "session_no_repository": "the session is not in a repository: there is no diff",
    "daemon_failing": "the daemon is failing: try later, or ask the human",
    "daemon_error": "the daemon refused the call (detail.daemon_code): read the session before retrying",
}

_MESSAGES: dict[str, str] = {
    "plugin_invalid_request": "the arguments do not match the tool's schema",
    "plugin_host_denied": "the policy does not allow this host",
    "plugin_self_target_denied": "this change may not target the session that hosts the caller",
    "plugin_session_not_found": "no session has that id or name",
    "plugin_ambiguous_session": "more than one session has that name",
    "plugin_session_conflict": "a session with that name does not match the request",
    "plugin_project_not_found": "no project matches",
    "plugin_ambiguous_project": "more than one project matches",
    "plugin_agent_denied": "the host does not support that agent profile",
    "plugin_busy": "the tool limit of concurrent calls is reached",
    "plugin_tool_timeout": "the tool's time budget was spent",
    "plugin_output_limit_exceeded": "the result is larger than the policy allows",
    "internal_error": "the tool failed unexpectedly",
    "request_timeout": "the daemon did not answer in time",
    "pohunek_cli_incompatible": "the daemon does not speak the client's protocol window",
    "pohunek_cli_invalid_envelope": "the daemon's answer had an unexpected shape",
    "pohunek_cli_unavailable": "the operator CLI cannot be run",
    "pohunek_cli_failed": "the operator CLI ended without an answer",
    "plugin_policy_invalid": "the plugin's policy does not load",
    "daemon_unreachable": "the session daemon does not answer",
    "host_unreachable": "the host does not answer",
    "host_unknown": "the daemon knows no such host",
    "session_not_found": "the session does not exist (any more)",
    "session_not_running": "the session is not running",
    "session_terminal_unavailable": "the session has no terminal to read",
    "session_runtime_changed": "the session runs another runtime now",
    "invalid_output_cursor": "the output cursor is not valid for this runtime",
    "session_waiter_limit_reached": "too many waits are open",
    "session_input_rejected": "the input was refused",
    "agent_not_resumable": "the session cannot be resumed",
    "agent_runtime_unsupported": "the agent's runtime version is not supported",
    "runtime_not_installed": "the agent's runtime is not installed",
    "runtime_incompatible": "the agent's runtime is incompatible",
    "idempotency_conflict": "the change's key was already used differently",
    "session_live": "the session is running",
    "session_remove_unconfirmed": "removing the session would lose unmerged work",
    "session_limit_reached": "the host holds the most sessions it may",
    "session_no_repository": "the session is not in a repository",
    "daemon_failing": "the daemon is failing",
    "daemon_error": "the daemon refused the call",
}


class ToolError(Exception):
    """One typed answer; ``code`` must be a key of ``RECOVER``."""

    def __init__(self, code: str, message: str, detail: dict[str, Any] | None = None):
        if code not in RECOVER:
            raise ValueError(f"not a tool error code: {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.detail = detail


def error(code: str, detail: dict[str, Any] | None = None) -> ToolError:
    """The error of ``code`` with our fixed message."""
    return ToolError(code, _MESSAGES[code], detail)


def ok(result: Any) -> str:
    return json.dumps({"ok": True, "result": result}, ensure_ascii=False, separators=(",", ":"))


def failure(err: ToolError) -> str:
    body: dict[str, Any] = {"code": err.code, "message": err.message, "recover": RECOVER[err.code]}
    if err.detail:
        body["detail"] = err.detail
    return json.dumps({"ok": False, "error": body}, ensure_ascii=False, separators=(",", ":"))
