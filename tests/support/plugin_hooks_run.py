"""The plugin's seven hooks, called as Hermes calls them, in a process of their own under an
audit hook. Prints one JSON line: what the hooks did that they must never do, any exception
that escaped, both counters, and whether a payload value was ever looked at. Then waits for
stdin to close: the reporter checks a reporting process while it still runs.

Run as ``python tests/support/plugin_hooks_run.py`` from the checkout, with the session's env;
with ``STANDALONE_ENV=1`` the payload finds none of this project's packages, as inside another
Hermes, and reports through its own standard-library sender.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from hermes_cli.operator.probe_script import FORBIDDEN, NETWORK
from tests.support.operator_plugin import payload

SECRET = "sk-live-7f3a9c-the-owners-password"
STANDALONE_ENV = "PLUGIN_HOOKS_STANDALONE"


class Tripwire:
    """A payload value that notes any look at it (str, repr, bool, iteration, an attribute)."""

    touched = 0

    def _touch(self, *_: Any) -> Any:
        Tripwire.touched += 1
        return ""

    __str__ = __repr__ = __iter__ = __len__ = __bool__ = __eq__ = __hash__ = _touch  # type: ignore[assignment]

    def __getattr__(self, name: str) -> Any:
        Tripwire.touched += 1
        raise AttributeError(name)


def watch(home: str) -> list[str]:
    """Install the audit hook (for the rest of the process: one cannot be removed); the list
    it returns fills with each forbidden thing done from then on."""
    under_home = os.path.abspath(home) + os.sep
    seen: list[str] = []

    def audit(event: str, args: tuple[Any, ...]) -> None:
        # zmq's sockets are made and connected in C, so they raise no audit event: what is
        # seen here is Python-level work only (which is what the hooks must never do).
        if event in FORBIDDEN:  # socket.getaddrinfo among them
            seen.append(event)
        elif event in ("socket.connect", "socket.bind", "socket.sendto") and args[0].family in NETWORK:
            seen.append(event)
        elif event == "socket.__new__" and args[1] in NETWORK:
            seen.append(event)
        elif event == "open" and isinstance(args[0], str) and os.path.abspath(args[0]).startswith(under_home):
            seen.append(f"open {args[0]}")

    sys.addaudithook(audit)
    return seen


def main() -> None:
    if os.environ.get(STANDALONE_ENV) == "1":
        sys.modules["shared"] = None  # type: ignore[assignment]  # an import of it now fails
    hooks = payload("hooks")
    seen = watch(os.environ["HERMES_HOME"])
    payload_kwargs = {"user_message": SECRET, "conversation_history": Tripwire(), "model": Tripwire()}
    calls: list[tuple[str, dict[str, Any]]] = [
        ("on_session_start", {}),  # no id: nothing to claim
        ("on_session_start", {"session_id": "conv_a", "resumed": False}),
        ("pre_llm_call", {"session_id": "conv_a", **payload_kwargs}),
        ("pre_approval_request", {"session_id": "conv_a", "tool_name": Tripwire(), "command": SECRET}),
        ("post_approval_response", {"session_id": "conv_a", "approved": Tripwire()}),
        ("post_llm_call", {"session_id": "conv_a", "assistant_response": SECRET, **payload_kwargs}),
        ("pre_llm_call", {"session_id": "conv_b", **payload_kwargs}),  # compaction: a new id
        ("pre_llm_call", {"session_id": f"not an id {SECRET}", **payload_kwargs}),
        ("post_llm_call", {"session_id": "conv_b"}),
        ("on_session_end", {"session_id": "conv_b", **payload_kwargs}),
        ("on_session_finalize", {"session_id": "conv_b"}),
    ]
    callbacks = hooks.callbacks()
    escaped: list[str] = []
    for name, kwargs in calls:
        try:
            callbacks[name](**kwargs)
        except BaseException as exc:  # anything escaping is what the test reports
            escaped.append(f"{name}: {type(exc).__name__}")
    result = {
        "forbidden": seen,
        "escaped": escaped,
        "hooks": hooks.counters(),
        "reports": hooks.reports.counters(),
        "sender": hooks.reports.__name__.rpartition(".")[2],
        "touched": Tripwire.touched,
    }
    print(json.dumps(result), flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
