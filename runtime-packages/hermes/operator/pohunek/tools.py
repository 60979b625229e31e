"""The tool handlers: each call is bounded (a slot, a time budget, a result size), checked
(schema, host, origin guard), sent to the daemon, and answered in the closed set of
``errors``. A handler never raises.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from . import cli_runner, rules, schemas
from . import contract as p
from .errors import ToolError, error, failure, ok
from .hosts import WILDCARD
from .rules import Policy
from .transport import CallFailed, Direct, Transport

log = logging.getLogger(__name__)

START_POLL = 0.25  # seconds between the lists that look for a timed-out start
TEXT_RESERVE = 2048  # bytes of a result kept for the fields around its text
UNTRUSTED = "untrusted"

Args = dict[str, Any]
Summary = dict[str, Any]


class _Call:
    """One tool call's budget, over the toolbox's transport."""

    def __init__(self, box: Toolbox):
        self._box = box
        self._deadline = time.monotonic() + box.policy.tool_timeout_ms / 1000

    def remaining(self) -> float:
        return self._deadline - time.monotonic()

    def daemon(self, op: str, args: Args, *, limit: float | None = None) -> dict[str, Any]:
        """The daemon's answer to ``op`` within what is left of the budget; a dict, or the
        typed error it ends with."""
        remaining = self.remaining()
        if remaining <= 0:
            raise error("plugin_tool_timeout")
        origin = self._box.origin
        try:
            answer = self._box.transport.call(
                op, args, budget=remaining, limit=limit, origin=None if origin is None else origin.markers()
            )
        except CallFailed as exc:
            raise rules.daemon_failure(exc.code, op, budget_spent=exc.budget_spent) from None
        except cli_runner.RunFailed as exc:
            raise error(exc.code) from None
        if not isinstance(answer, dict):
            raise error("pohunek_cli_invalid_envelope")
        return answer


class Toolbox:
    def __init__(
        self,
        policy: Policy,
        window: tuple[int, int],
        *,
        env: Mapping[str, str] | None = None,
        transport: Transport | None = None,
    ):
        """``transport`` defaults to the in-process one over the policy's endpoint."""
        self.policy = policy
        self.window = window
        self.origin = rules.origin_from_env(os.environ if env is None else env)
        self.transport = transport if transport is not None else Direct(policy.daemon_endpoint, window)
        self._slots = threading.BoundedSemaphore(policy.max_concurrency)
        self._tools: dict[str, Callable[[_Call, Args], Any]] = {
            "pohunek_hosts": self._hosts,
            "pohunek_sessions": self._sessions,
            "pohunek_session_get": self._get,
            "pohunek_session_screen": self._screen,
            "pohunek_session_output": self._output,
            "pohunek_session_wait": self._wait,
            "pohunek_session_diff": self._diff,
            "pohunek_session_start": self._start,
            "pohunek_session_send": self._send,
            "pohunek_session_resume": self._resume,
            "pohunek_session_fork": self._fork,
            "pohunek_session_resize": self._resize,
            "pohunek_session_rename": self._rename,
            "pohunek_session_set_metadata": self._set_metadata,
            "pohunek_session_stop": self._stop,
            "pohunek_session_remove": self._remove,
        }

    def handler(self, name: str) -> Callable[..., str]:
        tool = self._tools[name]

        def handle(args: Any = None, **_context: Any) -> str:
            if not self._slots.acquire(blocking=False):
                return failure(error("plugin_busy"))
            try:
                return self._run(name, tool, args)
            finally:
                self._slots.release()

        return handle

    def _run(self, name: str, tool: Callable[[_Call, Args], Any], args: Any) -> str:
        try:
            return rules.fit(tool(_Call(self), schemas.validate(name, args)), self.policy.max_output_bytes)
        except ToolError as exc:
            return failure(exc)
        except Exception as exc:  # never into the turn; never with the arguments in the log
            log.error("tool %s failed unexpectedly: %s", name, type(exc).__name__)
            self.transport.reset()
            return failure(error("internal_error"))

    # --- the steps every session tool shares ----------------------------------------------

    def _target(self, call: _Call, name: str, args: Args) -> tuple[str, Summary]:
        """The host and the one session the reference names, both checked before any change."""
        host = rules.choose_host(self.policy, args.get("host"))
        rules.guard(name, self.origin, args["session"])
        session = rules.resolve(args["session"], _list(call, host))
        rules.guard(name, self.origin, session["id"])
        return host, session

    def _fitted(self, data: bytes, limit: int, build: Callable[[rules.Clipped], Args]) -> Args:
        """The result ``build`` makes of ``data`` cut to ``limit``, cut further until the whole
        result fits the policy once serialized (escapes can make text grow)."""
        limit = min(limit, max(1, self.policy.max_output_bytes - TEXT_RESERVE))
        while True:
            result = build(rules.clip(data, limit, more_follows=True))
            if limit <= 1 or len(ok(result).encode("utf-8")) <= self.policy.max_output_bytes:
                return result
            limit //= 2

    # --- reads ----------------------------------------------------------------------------

    def _hosts(self, call: _Call, args: Args) -> Any:
        allowed = self.policy.allowed_hosts
        return {
            "hosts": [h for h in allowed if h != WILDCARD],
            "wildcard": WILDCARD in allowed,
            "discovery_performed": False,
        }

    def _sessions(self, call: _Call, args: Args) -> Any:
        host = rules.choose_host(self.policy, args.get("host"))
        wanted = {("project_id" if k == "project" else k): v for k, v in args.get("filters", {}).items()}
        found = [s for s in _list(call, host) if all(s.get(k) == v for k, v in wanted.items())]
        kept, truncated = rules.bounded_list(found)
        return {"host": host, "sessions": kept, "count": len(found), "truncated": truncated}

    def _get(self, call: _Call, args: Args) -> Any:
        host, session = self._target(call, "pohunek_session_get", args)
        return call.daemon(p.SESSION_GET, {"host": host, "session": session["id"]})

    def _screen(self, call: _Call, args: Args) -> Any:
        host, session = self._target(call, "pohunek_session_screen", args)
        screen = call.daemon(p.SESSION_SCREEN, {"host": host, "session": session["id"]})
        lines = screen.get("visible_lines")
        if not isinstance(lines, list) or not all(isinstance(line, str) for line in lines):
            raise error("pohunek_cli_invalid_envelope")
        # Blank rows at the bottom carry nothing but bytes.
        clipped = rules.clip("\n".join(lines).rstrip("\n").encode("utf-8"), self.policy.max_screen_bytes)
        kept = {k: screen.get(k) for k in ("session_id", "worker_instance_id", "runtime_generation", "watermark")}
        return {
            **kept,
            "dimensions": screen.get("dimensions"),
            "cursor": screen.get("cursor"),
            "alternate_screen": screen.get("alternate_screen"),
            "text": clipped.text,
            "truncated": clipped.truncated,
            "utf8_replaced": bool(screen.get("utf8_replaced")),
            "content_trust": UNTRUSTED,
        }

    def _output(self, call: _Call, args: Args) -> Any:
        rules.check_u64(args, "after_offset", "runtime_generation")
        max_bytes = rules.output_bytes(self.policy, args.get("max_bytes"))
        host, session = self._target(call, "pohunek_session_output", args)
        rules.check_runtime(args, session)
        ask: Args = {
            k: args[k] for k in ("worker_instance_id", "runtime_generation", "after_offset", "wait_ms") if k in args
        }
        limit = None if "wait_ms" not in args else p.SESSION_OUTPUT_TIMEOUT + args["wait_ms"] / 1000
        page = call.daemon(
            p.SESSION_OUTPUT,
            {"host": host, "session": session["id"], **ask, "max_bytes": min(max_bytes, p.OUTPUT_MAX_BYTES)},
            limit=limit,
        )
        data, start = page.get("data"), page.get("start_offset")
        if not isinstance(data, bytes) or not isinstance(start, str) or not start.isdigit():
            raise error("pohunek_cli_invalid_envelope")
        return self._fitted(data, max_bytes, lambda clipped: _page(page, start, len(data), clipped))

    def _wait(self, call: _Call, args: Args) -> Any:
        rules.check_u64(args, "runtime_generation", "after_terminal_watermark", "after_output_offset")
        host, session = self._target(call, "pohunek_session_wait", args)
        ask = {k: v for k, v in args.items() if k not in ("host", "session")}
        waited = call.daemon(
            p.SESSION_WAIT,
            {"host": host, "session": session["id"], **ask},
            limit=p.SESSION_WAIT_TIMEOUT + args["timeout_ms"] / 1000,
        )
        summary = waited.get("session")
        if not isinstance(summary, dict) or not isinstance(waited.get("reason"), str):
            raise error("pohunek_cli_invalid_envelope")
        # The offset and watermark it returns count in the session's runtime: named beside them.
        return {**waited, **rules.runtime_of(summary), **rules.wait_outcome(waited["reason"], summary.get("state"))}

    def _diff(self, call: _Call, args: Args) -> Any:
        host, session = self._target(call, "pohunek_session_diff", args)
        found = call.daemon(
            p.SESSION_DIFF,
            {
                "host": host,
                "session": session["id"],
                "max_bytes": min(p.OUTPUT_MAX_BYTES, self.policy.max_output_bytes),
            },
        )
        text, files = found.get("diff"), found.get("files")
        if not isinstance(text, str) or not isinstance(files, list):
            raise error("pohunek_cli_invalid_envelope")
        kept, more_files = rules.bounded_list(files)
        known = {"session_id": session["id"], "base": found.get("base"), "files": kept, "files_truncated": more_files}
        return self._fitted(
            text.encode("utf-8"),
            self.policy.max_output_bytes,
            lambda clipped: {
                **known,
                "text": clipped.text,
                "truncated": clipped.truncated or bool(found.get("truncated")),
                "content_trust": UNTRUSTED,
            },
        )

    # --- the one permitted start ----------------------------------------------------------

    def _start(self, call: _Call, args: Args) -> Any:
        host = rules.choose_host(self.policy, args.get("host"))
        if "initial_input" in args:
            rules.check_text_bytes(args["initial_input"], "initial_input", p.INPUT_MAX_BYTES)
        agent = args["agent_profile"]
        rules.check_agent(agent, call.daemon(p.HOST_INSPECT, {"host": host}))
        worktree = args.get("worktree", {})
        projects = _entries(call.daemon(p.PROJECT_LIST, {"host": host}), "projects")
        project = rules.resolve_project(args.get("project") or worktree["project"], projects)
        ask: Args = {"host": host, "agent": agent, "name": args["name"]}
        ask["project"] = rules.daemon_project(project, projects)
        ask.update({k: worktree[k] for k in ("branch", "base_branch") if k in worktree})
        ask.update({k: args[k] for k in ("cols", "rows") if k in args})
        if "initial_input" in args:
            ask["input"] = args["initial_input"]
        request = rules.StartRequest(args["name"], agent, project["id"], worktree.get("branch"))
        try:
            started = call.daemon(
                p.SESSION_NEW, {**ask, "idempotency_key": _key()}, limit=self.policy.request_timeout_ms / 1000
            )
        except ToolError as exc:
            # Unanswered, whichever limit cut it short: the start may exist, so never send another.
            if exc.code not in ("request_timeout", "plugin_tool_timeout"):
                raise
            return {**_changed(self._recover(call, host, request)), "recovered": True}
        return {**_changed(started), "recovered": False}

    def _recover(self, call: _Call, host: str, request: rules.StartRequest) -> Summary:
        """After a start timed out: never start again; look for it by name until the budget
        is spent."""
        while call.remaining() > 0:
            try:
                entries = _entries(call.daemon(p.SESSION_LIST, {"host": host, "name": request.name}), "sessions")
            except ToolError as exc:
                if exc.code in ("plugin_tool_timeout", "request_timeout"):
                    break
                raise
            found = rules.start_match(entries, request)
            if found is not None:
                return found
            time.sleep(max(0.0, min(START_POLL, call.remaining())))
        raise error("request_timeout")

    # --- changes --------------------------------------------------------------------------

    def _mutate(self, call: _Call, name: str, op: str, args: Args, extra: Args | None = None) -> Summary:
        host, session = self._target(call, name, args)
        return call.daemon(op, {"host": host, "session": session["id"], "idempotency_key": _key(), **(extra or {})})

    def _send(self, call: _Call, args: Args) -> Any:
        rules.check_text_bytes(args["input"], "input", p.INPUT_MAX_BYTES)
        extra = {"text": args["input"], **({"submit": args["submit"]} if "submit" in args else {})}
        sent = self._mutate(call, "pohunek_session_send", p.SESSION_INPUT, args, extra)
        return {k: sent.get(k) for k in ("session_id", "worker_instance_id", "runtime_generation", "bytes_written")}

    def _resume(self, call: _Call, args: Args) -> Any:
        extra: Args = {k: args[k] for k in ("cols", "rows") if k in args}
        return _changed(self._mutate(call, "pohunek_session_resume", p.SESSION_RESUME, args, extra))

    def _fork(self, call: _Call, args: Args) -> Any:
        extra = {"name": args["name"]} if "name" in args else {}
        forked = self._mutate(call, "pohunek_session_fork", p.SESSION_FORK, args, extra)
        if forked.get("fork_supported") is False:
            return {
                "fork_supported": False,
                "session_id": forked.get("session_id"),
                "error": {"code": p.AGENT_FORK_UNSUPPORTED, "message": "this agent's sessions cannot be forked"},
            }
        child = forked.get("session")
        if not isinstance(child, dict):
            raise error("pohunek_cli_invalid_envelope")
        return {"fork_supported": True, "parent_session_id": forked.get("session_id"), **_changed(child)}

    def _resize(self, call: _Call, args: Args) -> Any:
        geometry = {"cols": args["cols"], "rows": args["rows"]}
        return _changed(self._mutate(call, "pohunek_session_resize", p.SESSION_RESIZE, args, geometry))

    def _rename(self, call: _Call, args: Args) -> Any:
        return _changed(self._mutate(call, "pohunek_session_rename", p.SESSION_RENAME, args, {"name": args["name"]}))

    def _set_metadata(self, call: _Call, args: Args) -> Any:
        host, session = self._target(call, "pohunek_session_set_metadata", args)
        current = session.get("metadata")
        merged = {k: v for k, v in (current if isinstance(current, dict) else {}).items() if isinstance(v, str)}
        for key, value in args["metadata"].items():  # the daemon stores a whole map: null clears a field
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        ask = {"host": host, "session": session["id"], "metadata": merged, "idempotency_key": _key()}
        return _changed(call.daemon(p.SESSION_SET_METADATA, ask))

    def _stop(self, call: _Call, args: Args) -> Any:
        return _changed(self._mutate(call, "pohunek_session_stop", p.SESSION_STOP, args))

    def _remove(self, call: _Call, args: Args) -> Any:
        removed = self._mutate(call, "pohunek_session_remove", p.SESSION_REMOVE, args)
        return {"session_id": removed.get("session_id"), "removed": removed.get("removed") is True}


def _page(page: Args, start: str, size: int, clipped: rules.Clipped) -> Args:
    """An output result: the daemon's offsets, unless the text was cut here; then the next
    offset is the one after the bytes returned, so the next read misses nothing."""
    cut = clipped.kept < size
    result = {
        "session_id": page.get("session_id"),
        "text": clipped.text,
        "utf8_replaced": clipped.utf8_replaced,
        "truncated": clipped.truncated,
        "start_offset": start,
        "next_offset": str(int(start) + clipped.kept) if cut else page.get("next_offset"),
        "history_start_offset": page.get("history_start_offset"),
        "runtime_end_offset": page.get("runtime_end_offset"),
        "has_more": bool(page.get("has_more")) or cut,
        "timed_out": bool(page.get("timed_out")),
        "worker_instance_id": page.get("worker_instance_id"),
        "runtime_generation": page.get("runtime_generation"),
        "content_trust": UNTRUSTED,
    }
    if "gap" in page:
        result["gap"] = page["gap"]
        result["action"] = rules.GAP_ACTION
    return result


def _key() -> str:
    """A fresh key per tool call: the client's one retry of it is answered, not repeated."""
    return secrets.token_hex(16)


def _entries(answer: dict[str, Any], key: str) -> list[dict[str, Any]]:
    entries = answer.get(key)
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise error("pohunek_cli_invalid_envelope")
    return entries


def _list(call: _Call, host: str) -> list[Summary]:
    return _entries(call.daemon(p.SESSION_LIST, {"host": host}), "sessions")


def _changed(summary: Summary) -> dict[str, Any]:
    """A change's answer: the logical id and the runtime it now has, beside the summary."""
    runtime = summary.get("runtime")
    if not isinstance(summary.get("id"), str) or not isinstance(runtime, dict):
        raise error("pohunek_cli_invalid_envelope")
    return {
        "session_id": summary["id"],
        "worker_instance_id": runtime.get("worker_instance_id"),
        "runtime_generation": runtime.get("runtime_generation"),
        "session": summary,
    }
