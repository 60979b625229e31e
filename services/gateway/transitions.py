"""How a served profile's ``gateway_state`` moves: every move a gateway makes, and what makes it.
Pure: no I/O. The state names are the contract's (``shared.gateways.ops.STATES``); its readers
need only those, so the moves live here, with the one process that makes them.

Every start begins at ``starting``, a re-exec's too: the new image writes the state files
afresh, the old image's having said ``stopped``. ``stopped`` and ``startup_failed`` are final.
A move the table lacks is a bug in the gateway, never a caller's doing: ``check`` refuses it.
"""

from __future__ import annotations

from shared.gateways import ops

START = ops.STARTING

# (from, to) -> what makes the move, in the order the diagram shows them.
TRANSITIONS: dict[tuple[str, str], str] = {
    (ops.STARTING, ops.RUNNING): "every served profile's sockets answer",
    (ops.STARTING, ops.DRAINING): "every served profile's sockets answer, a drain asked meanwhile",
    (ops.STARTING, ops.STOPPING): "let go, or its process exits, before every socket answers",
    (ops.STARTING, ops.STARTUP_FAILED): "serving failed before every socket answered",
    (ops.RUNNING, ops.DRAINING): "drain, reexec, release, SIGUSR1/SIGTERM/SIGINT, or its home deleted",
    (ops.DRAINING, ops.STOPPING): "its process exits or re-executes, or lets this profile go",
    (ops.STOPPING, ops.STOPPED): "its sockets are closed",
}


class IllegalTransition(ops.GatewayError):
    """A move the table lacks: the state is left as it was."""

    code = "illegal_transition"


def check(current: str, new: str) -> None:
    """Nothing when a gateway may go from ``current`` to ``new``; else IllegalTransition."""
    if (current, new) not in TRANSITIONS:
        raise IllegalTransition(f"a gateway does not go from {current} to {new}", detail={"from": current, "to": new})


def final_states(table: dict[tuple[str, str], str] = TRANSITIONS) -> list[str]:
    """The states no move leaves, in the contract's order."""
    leaving = {current for current, _ in table}
    return [state for state in ops.STATES if state not in leaving]


def render(table: dict[tuple[str, str], str] = TRANSITIONS) -> str:
    """The table as a text diagram: one line per move, then the final states."""
    width = max(len(current) for current, _ in table)
    to_width = max(len(new) for _, new in table)
    lines = [f"start: {START} (every start, a re-exec's too)", ""]
    lines += [f"{current:<{width}} ──► {new:<{to_width}}  {why}".rstrip() for (current, new), why in table.items()]
    lines += ["", f"final: {', '.join(final_states(table))}"]
    return "\n".join(lines)
