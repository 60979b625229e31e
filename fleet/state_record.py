"""``gateway_state.json`` as the Hermes Agent and this mesh both write it, and when a record
vouches for the process it names.

The Hermes Agent's gateway writes ``kind`` (``"hermes-gateway"``), ``pid``, ``start_time``
(``/proc/<pid>/stat`` field 22), ``argv``, ``gateway_state``, ``exit_reason``,
``restart_requested``, ``active_agents``, ``platforms`` (``{name: {"state", "error_code",
"error_message", "updated_at"}}``), ``updated_at`` and, for a multiplex gateway,
``served_profiles``. The mesh's gateway writes the same fields, and its own beside them. A
record written by an older mesh has no ``kind`` nor ``active_agents``.

No trio here: the CLI imports this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleet.command_lines import looks_like_gateway_runtime_command_line
from shared.identity import ProcessIdentity, is_alive, read_cmdline

KIND = "hermes-gateway"


def identity(state: Mapping[str, Any]) -> ProcessIdentity | None:
    try:
        return ProcessIdentity.from_dict(state)
    except ValueError:
        return None


def active_turns(state: Mapping[str, Any]) -> int | None:
    """The turns in flight: the mesh's ``active_turns``, else the Hermes Agent's ``active_agents``."""
    for key in ("active_turns", "active_agents"):
        value = state.get(key)
        if type(value) is int and value >= 0:
            return value
    return None


def names_live_gateway(state: Mapping[str, Any]) -> bool:
    """Whether the process the record names still runs and is that gateway, as the Hermes
    Agent's readers judge it: the same pid and start time, then its command line when it can be
    read; when it cannot (a hidden or foreign ``/proc``, a process between programs), the
    record itself, which must say it is a gateway's (``kind``) and name a gateway's argv. A
    record without ``kind`` vouches for nothing by itself."""
    ident = identity(state)
    if ident is None or not is_alive(ident):
        return False
    return vouches(state, read_cmdline(ident.pid))


def vouches(state: Mapping[str, Any], cmdline: list[str] | None) -> bool:
    """The command-line half of ``names_live_gateway``: ``cmdline`` is the live process's
    (None or empty when it cannot be read)."""
    if cmdline:
        return looks_like_gateway_runtime_command_line(cmdline)
    argv = state.get("argv")
    return state.get("kind") == KIND and isinstance(argv, list) and looks_like_gateway_runtime_command_line(argv)
