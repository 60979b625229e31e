"""What the supervisord kind calls a profile's gateway program, and the exact inverse."""

from __future__ import annotations

from shared.supervisors import profile_for, unit_name_for

KIND = "supervisord"
PROGRAM_PREFIX = "hermes-gateway"


def unit_name(profile: str) -> str:
    """``hermes-gateway`` for the default profile, ``hermes-gateway-<profile>`` otherwise."""
    return unit_name_for(profile, PROGRAM_PREFIX)


def profile_of(name: str) -> str | None:
    """The exact inverse of ``unit_name``: None for any name it would never produce."""
    return profile_for(name, PROGRAM_PREFIX)
