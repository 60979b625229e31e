"""The operator plugin's access policy: its fields, ceilings and host syntax. No I/O.

One JSON object, written by the installer outside the plugin's checksummed assets and read by
the plugin (``pohunek/policy.py`` opens the file; this module judges what it holds). The same
rules check the installer's flags, so a policy the installer writes is one the plugin loads.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.errors import HermesError

SCHEMA_VERSION = 1
ACCESS_MODES = ("read_only", "manage", "full")
WILDCARD = "*"
LOCAL = "local"

MAX_TOOL_TIMEOUT_MS = 60_000
DEFAULT_REQUEST_TIMEOUT_MS = 45_000
LEGACY_REQUEST_TIMEOUT_MS = 5_000  # a policy written before the field existed
MAX_OUTPUT_BYTES = 1_048_576
MAX_SCREEN_BYTES = 262_144
MAX_CONCURRENCY = 8


class InvalidPolicy(HermesError):
    """The policy (or an installer flag that would go into it) breaks a rule; ``detail.field``
    names the field and ``hint`` what to change."""

    code = "hermes_invalid_policy"


@dataclass(frozen=True)
class Policy:
    daemon_endpoint: str
    protocol_min: int
    protocol_max: int
    access_mode: str
    allowed_hosts: tuple[str, ...]
    tool_timeout_ms: int
    request_timeout_ms: int
    max_output_bytes: int
    max_screen_bytes: int
    max_concurrency: int


# placeholder until merged: the policy rules' own host check replaces this one.
def host_allowed(policy: Policy, host: str) -> bool:
    """``host`` exactly listed; or, with the wildcard listed, any valid DNS name or ``local``,
    never an IP literal."""
    import ipaddress
    import re

    if host in policy.allowed_hosts:
        return True
    if WILDCARD not in policy.allowed_hosts:
        return False
    try:
        ipaddress.ip_address(host)
        return False
    except ValueError:
        pass
    label = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
    return host == LOCAL or (len(host) <= 253 and re.fullmatch(rf"{label}(\.{label})*", host) is not None)
