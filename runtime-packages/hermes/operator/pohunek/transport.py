"""How a tool call reaches the daemon: in process over ZeroMQ where this project's packages
import (``Direct``, as in our own chat), or through the installed operator CLI where they do
not (``Cli``, inside any other Hermes). Both send the same op with the same arguments through
``shared.operator.tool_calls`` and end the same way: the answer, or ``CallFailed`` with the
daemon's (or the transport's) code.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Mapping
from typing import Any, Protocol

from . import cli_runner

CLI_GRACE = 2.0  # seconds a CLI run may take beyond the call's budget: its own start and exit


class CallFailed(Exception):
    """``code`` ended the call; ``budget_spent`` when the tool's budget, not the op's own
    timeout, cut it short."""

    def __init__(self, code: str, *, budget_spent: bool):
        super().__init__(code)
        self.code = code
        self.budget_spent = budget_spent


class Transport(Protocol):
    def call(
        self, op: str, args: Mapping[str, Any], *, budget: float, limit: float | None, origin: Mapping[str, str] | None
    ) -> Any: ...

    def reset(self) -> None: ...


class Direct:
    """In process: one client per calling thread (a zmq socket is one thread's), kept between
    calls, since a connection per call would cost more than most calls."""

    def __init__(self, endpoint: str, window: tuple[int, int]):
        from shared.operator import tool_calls  # only here: the CLI path runs without it

        self._calls = tool_calls
        self._endpoint = endpoint
        self._window = window
        self._local = threading.local()

    def _client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            from shared.operator.client import DaemonClient

            client = self._local.client = DaemonClient(self._endpoint, window=self._window)
        return client

    def call(
        self, op: str, args: Mapping[str, Any], *, budget: float, limit: float | None, origin: Mapping[str, str] | None
    ) -> Any:
        try:
            return self._calls.call(self._client(), op, args, budget=budget, limit=limit, origin=origin)
        except self._calls.CallFailed as exc:
            self.reset()  # a late answer or a broken connection must not meet the next call
            raise CallFailed(exc.code, budget_spent=exc.budget_spent) from None

    def reset(self) -> None:
        client = getattr(self._local, "client", None)
        if client is not None:
            client.close()
            self._local.client = None


class Cli:
    """Through ``hermes-operator call``: one process per call, nothing kept between calls."""

    def __init__(self, cli: str, policy_path: str):
        self._cli = cli
        self._policy_path = policy_path

    def call(
        self, op: str, args: Mapping[str, Any], *, budget: float, limit: float | None, origin: Mapping[str, str] | None
    ) -> Any:
        request = {
            "args": dict(args),
            "budget_ms": max(1, int(budget * 1000)),
            "limit_ms": None if limit is None else max(1, int(limit * 1000)),
            "origin": dict(origin) if origin else None,
        }
        argv = ["call", "--policy", self._policy_path, op]
        raw = json.dumps(request, ensure_ascii=False).encode("utf-8")
        code, answer = cli_runner.run(self._cli, argv, raw, timeout=budget + CLI_GRACE)
        if code == 0:
            try:
                return from_json(answer.get("result"))
            except ValueError:  # bytes spelled in something that is not base64
                raise cli_runner.RunFailed("pohunek_cli_invalid_envelope") from None
        failure = answer.get("error")
        if not isinstance(failure, dict) or not isinstance(failure.get("code"), str):
            raise cli_runner.RunFailed("pohunek_cli_invalid_envelope")
        if code == 1:
            raise CallFailed(failure["code"], budget_spent=failure.get("budget_spent") is True)
        if failure["code"] == "cli_incompatible":
            raise cli_runner.RunFailed("pohunek_cli_incompatible")
        if code == 3:
            raise cli_runner.RunFailed("plugin_policy_invalid")
        raise cli_runner.RunFailed("pohunek_cli_failed")  # it refused a call we built: a bug

    def reset(self) -> None:
        """Nothing is kept between calls."""


def from_json(value: Any) -> Any:
    """An answer as the CLI spelled it, back as the daemon sent it: ``{"$bytes": …}`` as bytes."""
    if isinstance(value, dict):
        if len(value) == 1 and isinstance(value.get("$bytes"), str):
            return base64.b64decode(value["$bytes"], validate=True)
        return {key: from_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [from_json(item) for item in value]
    return value
