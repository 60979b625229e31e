"""The policy an install or update writes: from the flags, over what is installed.

Bounds arrive as the raw strings of their flags, so that a repeated flag, ``1e3`` or ``+5`` is
a typed ``hermes_invalid_policy`` rather than a parser message. Install uses the defaults for
omitted bounds; update inherits each omitted bound, access mode, host list and the daemon
endpoint from the installed policy, and always refreshes the protocol range to this client's
window. Update never resets a setting it was not given: a policy whose only fault is that its
group or others may read it is read back (the rewrite makes it 0600), and one it cannot read
back refuses the update. The rules themselves are ``shared.operator.policy``'s, so what is
written is what the plugin loads.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hermes_cli.errors import ConfirmationRequired
from shared.operator import policy as rules
from shared.operator.policy_file import load_policy
from shared.operator.protocol import CLIENT_WINDOW

BOUND_FLAGS = {field: flag for field, (_, flag) in rules.BOUNDS.items()}
DEFAULT_BOUNDS = {
    "tool_timeout_ms": rules.MAX_TOOL_TIMEOUT_MS,
    "request_timeout_ms": rules.DEFAULT_REQUEST_TIMEOUT_MS,
    "max_output_bytes": rules.MAX_OUTPUT_BYTES,
    "max_screen_bytes": rules.MAX_SCREEN_BYTES,
    "max_concurrency": rules.MAX_CONCURRENCY,
}
_DECIMAL = re.compile(r"[0-9]{1,10}")
REINSTALL_HINT = (
    "Run `hermes operator install` with the same target flags and every policy flag (--access-mode, "
    "--allow-host, any bound): the installed policy cannot be read back, so update has nothing to keep."
)


def _invalid(field: str, message: str, hint: str) -> rules.InvalidPolicy:
    return rules.InvalidPolicy(message, detail={"field": field, "hint": hint})


def _bound(field: str, given: Sequence[str] | None) -> int | None:
    if not given:
        return None
    flag = BOUND_FLAGS[field]
    if len(given) > 1:
        raise _invalid(field, f"{flag} was given more than once", f"give {flag} once")
    if not _DECIMAL.fullmatch(given[0]):
        raise _invalid(field, f"{flag} takes a decimal integer", f"{flag} takes an integer from 1 to its ceiling")
    return int(given[0])


def _hosts(given: Sequence[str], confirm_wildcard: bool) -> tuple[str, ...]:
    hosts = tuple(given)
    if not all(rules.valid_host(host, allow_wildcard=True) for host in hosts):
        raise _invalid("allowed_hosts", "an --allow-host is not a host", "local, '*' or a DNS name; no IP literals")
    if len(set(hosts)) != len(hosts):
        raise _invalid("allowed_hosts", "an --allow-host was given twice", "give each host once")
    if rules.WILDCARD in hosts and not confirm_wildcard:
        raise ConfirmationRequired(
            "--allow-host '*' lets the plugin reach any host: confirm it with --confirm-wildcard",
            detail={"flag": "--confirm-wildcard"},
        )
    if confirm_wildcard and rules.WILDCARD not in hosts:
        raise _invalid("allowed_hosts", "--confirm-wildcard confirms --allow-host '*' only", "drop --confirm-wildcard")
    return hosts


def default_operator_cli() -> str | None:
    """This install's ``hermes-operator``, beside the interpreter running it, when it is there."""
    found = os.path.join(os.path.dirname(sys.executable), "hermes-operator")
    return found if os.path.isfile(found) and os.access(found, os.X_OK) else None


def build(
    *,
    bounds: Mapping[str, Sequence[str] | None],
    access_mode: str | None,
    hosts: Sequence[str] | None,
    confirm_wildcard: bool,
    endpoint: str,
    installed: rules.Policy | None,
    operator_cli: str | None = None,
) -> rules.Policy:
    """The policy to write: flags first, then the installed policy (update), then defaults."""
    values: dict[str, int] = {}
    for field in rules.BOUNDS:
        given = _bound(field, bounds.get(field))
        inherited = getattr(installed, field) if installed is not None else DEFAULT_BOUNDS[field]
        values[field] = inherited if given is None else given
    rules.check_bounds(**values)
    if hosts:
        allowed = _hosts(hosts, confirm_wildcard)
    elif installed is not None:
        if confirm_wildcard:
            raise _invalid(
                "allowed_hosts", "--confirm-wildcard confirms --allow-host '*' only", "give --allow-host '*'"
            )
        allowed = installed.allowed_hosts
    else:
        raise _invalid("allowed_hosts", "name at least one --allow-host", "--allow-host local, for this host")
    mode = access_mode or (installed.access_mode if installed is not None else None)
    if mode not in rules.ACCESS_MODES:
        raise _invalid("access_mode", "choose --access-mode", f"one of {', '.join(rules.ACCESS_MODES)}")
    if operator_cli is not None:
        cli: str | None = rules.operator_cli(operator_cli)
    else:
        cli = installed.operator_cli if installed is not None and installed.operator_cli else default_operator_cli()
    return rules.Policy(
        daemon_endpoint=installed.daemon_endpoint if installed is not None else endpoint,
        protocol_min=CLIENT_WINDOW[0],
        protocol_max=CLIENT_WINDOW[1],
        access_mode=mode,
        allowed_hosts=allowed,
        tool_timeout_ms=values["tool_timeout_ms"],
        request_timeout_ms=values["request_timeout_ms"],
        max_output_bytes=values["max_output_bytes"],
        max_screen_bytes=values["max_screen_bytes"],
        max_concurrency=values["max_concurrency"],
        operator_cli=cli,
    )


def read_installed(path: Path) -> rules.Policy | None:
    """What update keeps: the installed policy, None when there is none. A policy its group or
    others may read is read all the same; any other fault refuses, so nothing is reset."""
    if not os.path.lexists(path):
        return None
    try:
        return load_policy(str(path), readable_by_others=True)
    except rules.InvalidPolicy as exc:
        field = (exc.detail or {}).get("field", "policy")
        raise rules.InvalidPolicy(exc.message, detail={"field": field, "hint": REINSTALL_HINT}) from None


def encode(policy: rules.Policy) -> bytes:
    """The policy file's bytes (the installer writes them 0600 in 0700 directories)."""
    return json.dumps(rules.to_fields(policy), indent=2, sort_keys=True).encode() + b"\n"


def read(path: Path) -> rules.Policy:
    """The installed policy, read with the plugin's own file rules."""
    return load_policy(str(path))


def describe(path: Path, policy: rules.Policy) -> dict[str, Any]:
    """The policy as a result shows it."""
    return {
        "path": str(path),
        "access_mode": policy.access_mode,
        "allowed_hosts": list(policy.allowed_hosts),
        "wildcard": rules.WILDCARD in policy.allowed_hosts,
        "bounds": {field: getattr(policy, field) for field in rules.BOUNDS},
        "protocol": {"min": policy.protocol_min, "max": policy.protocol_max},
        "daemon_endpoint": policy.daemon_endpoint,
    }
