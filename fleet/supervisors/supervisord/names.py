"""What the supervisord kind calls a gateway's program, and the exact inverse.

A profile's own gateway is ``hermes-gateway[-<profile>]``. A multiplex gateway (one process
serving several profiles) is the one program ``hermes-multiplex``: lacking the
``hermes-gateway`` prefix, it is never taken for a profile's program. The gateway host is the
one program ``hermes-gateway-host``; the name a profile called ``host`` would have as its own
program, so the config tells the two apart by the command the program runs, never by its name."""

from __future__ import annotations

from fleet.supervisors import profile_for, unit_name_for

KIND = "supervisord"
PROGRAM_PREFIX = "hermes-gateway"
MULTIPLEX_PROGRAM = "hermes-multiplex"
HOST_PROGRAM = "hermes-gateway-host"
# The event listener that is the confirm's timer under the mesh (no gateway: never a profile's).
CONFIRM_TIMER = "hermes-confirm-timer"


def unit_name(profile: str) -> str:
    """``hermes-gateway`` for the default profile, ``hermes-gateway-<profile>`` otherwise."""
    return unit_name_for(profile, PROGRAM_PREFIX)


def profile_of(name: str) -> str | None:
    """The exact inverse of ``unit_name``: None for any name it would never produce."""
    return profile_for(name, PROGRAM_PREFIX)


def is_multiplex(name: str) -> bool:
    return name == MULTIPLEX_PROGRAM
