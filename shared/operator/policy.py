"""The operator plugin's access policy: its fields, ceilings and host syntax. No I/O.

One JSON object, written by the installer outside the plugin's checksummed assets and read by
the plugin (``pohunek/policy.py`` opens the file; this module judges what it holds). The same
rules check the installer's flags, so a policy the installer writes is one the plugin loads.

No message or hint repeats a value the policy holds: the file is the owner's, and what it
holds is not for a log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.operator.hosts import LOCAL, WILDCARD, valid_host
from shared.operator.hosts import host_allowed as _listed
from shared.operator.protocol import OperatorError

SCHEMA_VERSION = 1
ACCESS_MODES = ("read_only", "manage", "full")
# The tools each access mode registers, in the order a host lists them; a mode has every tool
# of the one before it.
READ_TOOLS = (
    "pohunek_hosts",
    "pohunek_sessions",
    "pohunek_session_get",
    "pohunek_session_screen",
    "pohunek_session_output",
    "pohunek_session_wait",
    "pohunek_session_diff",
)
MANAGE_TOOLS = READ_TOOLS + (
    "pohunek_session_start",
    "pohunek_session_send",
    "pohunek_session_resume",
    "pohunek_session_fork",
    "pohunek_session_resize",
    "pohunek_session_rename",
    "pohunek_session_set_metadata",
)
FULL_TOOLS = MANAGE_TOOLS + ("pohunek_session_stop", "pohunek_session_remove")
TOOLS_BY_MODE = dict(zip(ACCESS_MODES, (READ_TOOLS, MANAGE_TOOLS, FULL_TOOLS), strict=True))

MAX_TOOL_TIMEOUT_MS = 60_000
DEFAULT_REQUEST_TIMEOUT_MS = 45_000
LEGACY_REQUEST_TIMEOUT_MS = 5_000  # a policy written before the field existed
MAX_OUTPUT_BYTES = 1_048_576
MAX_SCREEN_BYTES = 262_144
MAX_CONCURRENCY = 8

MAX_PROTOCOL = 2**31 - 1
MAX_ENDPOINT_CHARS = 512
ENDPOINT_SCHEMES = ("ipc://", "tcp://")
FIELDS = (
    "schema_version",
    "daemon_endpoint",
    "protocol_min",
    "protocol_max",
    "access_mode",
    "allowed_hosts",
    "tool_timeout_ms",
    "request_timeout_ms",
    "max_output_bytes",
    "max_screen_bytes",
    "max_concurrency",
    "operator_cli",
)
# Absent in a policy written before they existed; without ``operator_cli`` the plugin reaches
# the daemon only where this project's packages import.
OPTIONAL_FIELDS = frozenset({"request_timeout_ms", "operator_cli"})
MAX_CLI_PATH_CHARS = 4096

# Each bound: its ceiling and the installer flag that sets it.
BOUNDS = {
    "tool_timeout_ms": (MAX_TOOL_TIMEOUT_MS, "--tool-timeout-ms"),
    "request_timeout_ms": (MAX_TOOL_TIMEOUT_MS, "--request-timeout-ms"),
    "max_output_bytes": (MAX_OUTPUT_BYTES, "--max-output-bytes"),
    "max_screen_bytes": (MAX_SCREEN_BYTES, "--max-screen-bytes"),
    "max_concurrency": (MAX_CONCURRENCY, "--max-concurrency"),
}

_REWRITE = "rewrite the policy with `hermes operator update`"


class InvalidPolicy(OperatorError):
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
    operator_cli: str | None = None  # the absolute path of the installed ``hermes-operator``


def _invalid(field: str, message: str, hint: str) -> InvalidPolicy:
    return InvalidPolicy(message, detail={"field": field, "hint": hint})


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # True is an int to Python


def _int_in(field: str, value: Any, low: int, high: int, hint: str) -> int:
    if not _is_int(value):
        raise _invalid(field, f"{field} must be an integer", hint)
    if not low <= value <= high:
        raise _invalid(field, f"{field} is out of range", hint)
    return int(value)


def check_bounds(
    *,
    tool_timeout_ms: Any,
    request_timeout_ms: Any,
    max_output_bytes: Any,
    max_screen_bytes: Any,
    max_concurrency: Any,
) -> None:
    """Each bound an integer from 1 to its ceiling, and the request timeout below the tool
    timeout; a failure's hint names the installer flag to change."""
    values = {
        "tool_timeout_ms": tool_timeout_ms,
        "request_timeout_ms": request_timeout_ms,
        "max_output_bytes": max_output_bytes,
        "max_screen_bytes": max_screen_bytes,
        "max_concurrency": max_concurrency,
    }
    for field, (ceiling, flag) in BOUNDS.items():
        _int_in(field, values[field], 1, ceiling, f"{flag} takes an integer from 1 to {ceiling}")
    if request_timeout_ms >= tool_timeout_ms:
        raise _invalid(
            "request_timeout_ms",
            "request_timeout_ms must be lower than tool_timeout_ms",
            "--request-timeout-ms must be lower than --tool-timeout-ms "
            f"(its default, {DEFAULT_REQUEST_TIMEOUT_MS}, needs a larger tool timeout)",
        )


def host_allowed(policy: Policy, host: str) -> bool:
    """The exact host is listed, or ``*`` is and the host is a valid name."""
    return _listed(policy.allowed_hosts, host)


def overlap(policy: Policy, window: tuple[int, int]) -> tuple[int, int] | None:
    """The protocol versions both the policy and ``window`` accept, or None."""
    low, high = max(policy.protocol_min, window[0]), min(policy.protocol_max, window[1])
    return (low, high) if low <= high else None


def _endpoint(value: Any) -> str:
    hint = f"an ipc:// or tcp:// address of at most {MAX_ENDPOINT_CHARS} characters; {_REWRITE}"
    if type(value) is not str:
        raise _invalid("daemon_endpoint", "daemon_endpoint must be a string", hint)
    if value in ENDPOINT_SCHEMES or not value.startswith(ENDPOINT_SCHEMES) or len(value) > MAX_ENDPOINT_CHARS:
        raise _invalid("daemon_endpoint", "daemon_endpoint is not a daemon address", hint)
    if any(char.isspace() or not char.isprintable() for char in value):
        raise _invalid("daemon_endpoint", "daemon_endpoint holds whitespace or control characters", hint)
    return value


def operator_cli(value: Any) -> str:
    """The absolute path of the operator CLI the plugin runs (whether it is there is the
    plugin's and doctor's question: this rule does no I/O)."""
    hint = f"an absolute path of at most {MAX_CLI_PATH_CHARS} characters: give --operator-cli"
    if type(value) is not str or not value.startswith("/") or len(value) > MAX_CLI_PATH_CHARS:
        raise _invalid("operator_cli", "operator_cli must be an absolute path", hint)
    if not value.isprintable():
        raise _invalid("operator_cli", "operator_cli holds control characters", hint)
    return value


def _hosts(value: Any) -> tuple[str, ...]:
    hint = f"a non-empty list of unique hosts: {LOCAL!r}, {WILDCARD!r} or DNS names, no IP literals"
    if type(value) is not list or not value:
        raise _invalid("allowed_hosts", "allowed_hosts must be a non-empty list", hint)
    if not all(valid_host(host, allow_wildcard=True) for host in value):
        raise _invalid("allowed_hosts", "allowed_hosts holds an invalid host", hint)
    if len(set(value)) != len(value):
        raise _invalid("allowed_hosts", "allowed_hosts lists a host twice", hint)
    return tuple(value)


def _field_name(key: Any) -> str:
    # An unknown key is named only when it looks like a field name, never as any text.
    return key if type(key) is str and key.isidentifier() and len(key) <= 64 else "policy"


def check(raw: Any) -> Policy:
    """The policy ``raw`` (decoded JSON) holds, or ``InvalidPolicy`` for the first rule broken."""
    if type(raw) is not dict:
        raise _invalid("policy", "the policy must be a JSON object", _REWRITE)
    extra = [key for key in raw if key not in FIELDS]
    if extra:
        raise _invalid(_field_name(extra[0]), "the policy has a field this schema does not", _REWRITE)
    missing = [field for field in FIELDS if field not in raw and field not in OPTIONAL_FIELDS]
    if missing:
        raise _invalid(missing[0], f"the policy lacks {missing[0]}", _REWRITE)
    version = raw["schema_version"]
    if not _is_int(version) or version != SCHEMA_VERSION:
        raise _invalid("schema_version", f"schema_version must be {SCHEMA_VERSION}", _REWRITE)
    endpoint = _endpoint(raw["daemon_endpoint"])
    protocol_hint = f"integers from 1 to {MAX_PROTOCOL}, protocol_min <= protocol_max; {_REWRITE}"
    protocol_min = _int_in("protocol_min", raw["protocol_min"], 1, MAX_PROTOCOL, protocol_hint)
    protocol_max = _int_in("protocol_max", raw["protocol_max"], 1, MAX_PROTOCOL, protocol_hint)
    if protocol_min > protocol_max:
        raise _invalid("protocol_max", "protocol_max is below protocol_min", protocol_hint)
    mode = raw["access_mode"]
    if type(mode) is not str or mode not in ACCESS_MODES:
        raise _invalid("access_mode", "access_mode is not an access mode", f"one of {', '.join(ACCESS_MODES)}")
    hosts = _hosts(raw["allowed_hosts"])
    request_timeout_ms = raw.get("request_timeout_ms", LEGACY_REQUEST_TIMEOUT_MS)
    cli = operator_cli(raw["operator_cli"]) if "operator_cli" in raw else None
    check_bounds(
        tool_timeout_ms=raw["tool_timeout_ms"],
        request_timeout_ms=request_timeout_ms,
        max_output_bytes=raw["max_output_bytes"],
        max_screen_bytes=raw["max_screen_bytes"],
        max_concurrency=raw["max_concurrency"],
    )
    return Policy(
        daemon_endpoint=endpoint,
        protocol_min=protocol_min,
        protocol_max=protocol_max,
        access_mode=mode,
        allowed_hosts=hosts,
        tool_timeout_ms=raw["tool_timeout_ms"],
        request_timeout_ms=request_timeout_ms,
        max_output_bytes=raw["max_output_bytes"],
        max_screen_bytes=raw["max_screen_bytes"],
        max_concurrency=raw["max_concurrency"],
        operator_cli=cli,
    )


def to_fields(policy: Policy) -> dict[str, Any]:
    """The JSON object that holds ``policy`` (``check`` reads it back to an equal policy)."""
    fields = {
        "schema_version": SCHEMA_VERSION,
        "daemon_endpoint": policy.daemon_endpoint,
        "protocol_min": policy.protocol_min,
        "protocol_max": policy.protocol_max,
        "access_mode": policy.access_mode,
        "allowed_hosts": list(policy.allowed_hosts),
        "tool_timeout_ms": policy.tool_timeout_ms,
        "request_timeout_ms": policy.request_timeout_ms,
        "max_output_bytes": policy.max_output_bytes,
        "max_screen_bytes": policy.max_screen_bytes,
        "max_concurrency": policy.max_concurrency,
    }
    if policy.operator_cli is not None:
        fields["operator_cli"] = policy.operator_cli
    return fields
