"""Every op of every service of the mesh, under the name its service serves it as: what a grant
(``hermes mesh keys authorize NAME KEY --grant SERVICE.OP``) is checked against, and the table
of who may call what that docs/tcp-and-curve.md draws.

A service's ops are every ``OpSpec`` its ops module defines (and ``hello``, which every service
serves): an op added there is here without a word. Who may call an op is its own declaration
(``OpSpec.remote``); the rule that reads it is ``shared.transport.principals``.
"""

from __future__ import annotations

import textwrap
from types import ModuleType

from fleet.supervisors import host as gateway_host
from hermes_cli.errors import CliError
from services.auth_worker import ops as auth_worker
from services.handoff_retry import ops as handoff_retry
from services.hook_reporter import ops as hook_reporter
from services.updater import ops as updater
from shared.gateways import ops as gateway
from shared.operator import protocol as operator_daemon
from shared.protocol import HELLO, OpSpec, Remote
from shared.transport import grant_name
from simulators.operator_sim import ops as operator_sim

# The operator daemon's simulator serves the daemon's ops beside its own.
_SIMULATOR = "operator_sim"


def _ops_of(*modules: ModuleType) -> tuple[OpSpec, ...]:
    found: dict[str, OpSpec] = {HELLO.name: HELLO}
    for module in modules:
        found.update((value.name, value) for value in vars(module).values() if isinstance(value, OpSpec))
    return tuple(found.values())


SERVED: dict[str, tuple[OpSpec, ...]] = {
    gateway.SERVICE: _ops_of(gateway),
    updater.SERVICE: _ops_of(updater),
    auth_worker.SERVICE: _ops_of(auth_worker),
    handoff_retry.SERVICE: _ops_of(handoff_retry),
    hook_reporter.SERVICE: _ops_of(hook_reporter),
    gateway_host.SERVICE: _ops_of(gateway_host),
    _SIMULATOR: _ops_of(operator_daemon, operator_sim),
}

_WHY_NOT = {
    Remote.ALLOWED: "every authorized key may call it already",
    Remote.NEVER: "only this install's own keys may call it, whatever is granted",
}


class GrantInvalid(CliError):
    """A ``--grant`` that names no op a remote key needs a grant for."""

    code = "grant_invalid"


def grantable(service: str) -> list[str]:
    """The grants of ``service``: each of its ops a remote key may call only when granted it."""
    return [grant_name(service, spec.name) for spec in SERVED[service] if spec.remote is Remote.WITH_GRANT]


def check_grant(grant: str) -> str:
    """``grant`` when it names an op that takes a grant; ``GrantInvalid`` naming the field else."""
    service, _, op = grant.partition(".")
    if service not in SERVED:
        why = f"use SERVICE.OP, SERVICE one of {', '.join(SERVED)}"
    elif (spec := next((spec for spec in SERVED[service] if spec.name == op), None)) is None:
        why = f"{service} has no op {op!r}: its grants are {', '.join(grantable(service))}"
    elif spec.remote is not Remote.WITH_GRANT:
        assert spec.remote is not None  # OpSpec refuses an op that does not declare it
        why = _WHY_NOT[spec.remote]
    else:
        return grant
    raise GrantInvalid(f"--grant {grant!r}: {why}", detail={"field": "grant", "grant": grant})


def render() -> str:
    """Who may call what, service by service, as docs/tcp-and-curve.md draws it."""
    titles = {Remote.ALLOWED: "any key:", Remote.WITH_GRANT: "granted:", Remote.NEVER: "owner only:"}
    width = max(map(len, SERVED))
    lines = []
    for service, specs in SERVED.items():
        label = service
        for remote, title in titles.items():
            names = [spec.name for spec in specs if spec.remote is remote]
            if names:
                indent = " " * (width + 14)
                text = textwrap.fill(", ".join(names), 100, initial_indent=indent, subsequent_indent=indent)
                lines.append(f"{label:<{width}}  {title:<11} {text[len(indent) :]}")
                label = ""
    return "\n".join(lines) + "\n"
