"""``hermes-operator``: the operator CLI, one daemon call per run, for the operator plugin when
it runs inside a Hermes that has none of this project's packages.

Two fixed forms; every answer is one JSON line on stdout, nothing else is printed:

    hermes-operator settings --policy /abs/policy.json
    hermes-operator call --policy /abs/policy.json OP      (stdin: one JSON request)

``settings`` answers ``{"ok": true, "result": {"policy": {...}, "window": [min, max] | null}}``,
the policy as ``shared.operator.policy`` judged it. ``call`` sends ``OP`` (one of the tools' ops,
``shared.operator.tool_calls.TOOL_OPS``) with the request ``{"args": {...}, "budget_ms": N,
"limit_ms": N | null, "origin": {...} | null}`` and answers ``{"ok": true, "result": ...}``, bytes
spelled ``{"$bytes": "<base64>"}``, or ``{"ok": false, "error": {"code", ...}}``. Exit codes
(``shared.exit_codes``):

- 0: the daemon answered;
- 1: the daemon or the transport refused (``code`` is the daemon's or the client's, with
  ``budget_spent``);
- 2: the call itself is malformed (``invalid_request`` naming ``field``);
- 3: the policy cannot be used (``hermes_invalid_policy`` naming ``field``, or ``cli_incompatible``).

No message carries what the policy or the call holds.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Sequence
from typing import Any

from shared import exit_codes
from shared.operator import tool_calls
from shared.operator.client import DaemonClient
from shared.operator.policy import MAX_TOOL_TIMEOUT_MS, InvalidPolicy, Policy, to_fields
from shared.operator.policy_file import load_policy

MAX_REQUEST_BYTES = 1024 * 1024  # a tool's largest argument is 64 KiB of text
MAX_LIMIT_MS = 120_000  # a wait's own limit: its timeout plus the op's
REQUEST_KEYS = frozenset({"args", "budget_ms", "limit_ms", "origin"})
ORIGIN_KEYS = frozenset({"origin_session_id", "origin_daemon_id"})


# Not a HermesError: carries a ready error document and exit code to this module's own entry point.
class _Refused(Exception):
    def __init__(self, exit_code: int, error: dict[str, Any]):
        super().__init__(error["code"])
        self.exit_code = exit_code
        self.error = error


def _usage(field: str) -> _Refused:
    return _Refused(exit_codes.REFUSED, {"code": "invalid_request", "field": field})


def _policy(path: str) -> tuple[Policy, tuple[int, int] | None]:
    try:
        policy = load_policy(path)
    except InvalidPolicy as exc:
        raise _Refused(
            exit_codes.POLICY_UNUSABLE, {"code": exc.code, "field": (exc.detail or {}).get("field", "policy")}
        ) from None
    return policy, tool_calls.window(policy)


def _whole(value: Any, field: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise _usage(field)
    return value


def _request(raw: bytes) -> dict[str, Any]:
    if len(raw) > MAX_REQUEST_BYTES:
        raise _usage("request")
    try:
        request = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _usage("request") from None
    if type(request) is not dict or not set(request) <= REQUEST_KEYS:
        raise _usage("request")
    if type(request.get("args")) is not dict:
        raise _usage("args")
    _whole(request.get("budget_ms"), "budget_ms", 1, MAX_TOOL_TIMEOUT_MS)
    if request.get("limit_ms") is not None:
        _whole(request["limit_ms"], "limit_ms", 1, MAX_LIMIT_MS)
    origin = request.get("origin")
    if origin is not None and (
        type(origin) is not dict or set(origin) != ORIGIN_KEYS or not all(type(v) is str for v in origin.values())
    ):
        raise _usage("origin")
    return request


def jsonable(value: Any) -> Any:
    """``value`` as JSON can carry it: bytes as ``{"$bytes": base64}``."""
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def _call(path: str, op: str, raw: bytes) -> Any:
    if op not in tool_calls.TOOL_OPS:
        raise _usage("op")
    request = _request(raw)
    policy, window = _policy(path)
    if window is None:
        raise _Refused(exit_codes.POLICY_UNUSABLE, {"code": "cli_incompatible"})
    limit = request.get("limit_ms")
    with DaemonClient(policy.daemon_endpoint, window=window) as client:
        try:
            return tool_calls.call(
                client,
                op,
                request["args"],
                budget=request["budget_ms"] / 1000,
                limit=None if limit is None else limit / 1000,
                origin=request.get("origin"),
            )
        except tool_calls.CallFailed as exc:
            raise _Refused(exit_codes.FAILED, {"code": exc.code, "budget_spent": exc.budget_spent}) from None


def run(argv: Sequence[str], stdin: bytes) -> tuple[int, dict[str, Any]]:
    """The exit code and the answer of one run (pure but for the policy file and the call)."""
    try:
        if len(argv) == 3 and argv[0] == "settings" and argv[1] == "--policy":
            policy, window = _policy(argv[2])
            return exit_codes.OK, {
                "ok": True,
                "result": {"policy": to_fields(policy), "window": window and list(window)},
            }
        if len(argv) == 4 and argv[0] == "call" and argv[1] == "--policy":
            return exit_codes.OK, {"ok": True, "result": jsonable(_call(argv[2], argv[3], stdin))}
        raise _usage("argv")
    except _Refused as exc:
        return exc.exit_code, {"ok": False, "error": exc.error}


def main() -> None:
    argv = sys.argv[1:]
    stdin = sys.stdin.buffer.read(MAX_REQUEST_BYTES + 1) if argv[:1] == ["call"] else b""
    code, answer = run(argv, stdin)
    sys.stdout.write(json.dumps(answer, ensure_ascii=False, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    sys.exit(code)
