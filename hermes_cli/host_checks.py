"""``hermes doctor``'s checks of the other hosts this home sees (``shared.mesh_hosts``): every
service each host names is asked for a ``hello``, all of them at once within one bound, and
each check says how that ended (``hermes_cli.host_outcome``) and whether this home trusts a key
for the service.

A host that does not answer is a warning: this install runs without it. A refused handshake, a
service with no key held, or another error is a failure: the keys here and there disagree, and
only an operator can mend that.
"""

from __future__ import annotations

from pathlib import Path

from hermes_cli import host_outcome
from hermes_cli.doctor_check import FAIL, OK, WARN, Check
from hermes_cli.host_calls import ASK_SECONDS, ask_all
from shared import mesh_hosts
from shared.errors import HermesError
from shared.protocol import HELLO
from shared.transport import curve_keys


def host_checks(root: Path) -> list[Check]:
    try:
        hosts = mesh_hosts.hosts(root)
    except mesh_hosts.MeshHostsInvalid as exc:
        return [Check("hosts", FAIL, exc.message, {"code": exc.code, **(exc.detail or {})})]
    outcomes = ask_all(root, [(host, key) for host in hosts.values() for key in host.services], HELLO)
    checks = []
    for host in hosts.values():
        try:
            trusted = curve_keys.host_keys(root, host.name)
        except HermesError:  # a store it refuses to read (its check says why): no key trusted
            trusted = {}
        for key, port in host.services.items():
            checks.append(_check(host, key, port, key in trusted, outcomes[(host.name, key)]))
    return checks


def _check(host: mesh_hosts.Host, key: str, port: int, trusted: bool, outcome: host_outcome.Outcome) -> Check:
    where = f"{host.address}:{port}"
    if outcome.state == host_outcome.OK:
        status, message = OK, f"{where} answered over CURVE"
    elif outcome.state == host_outcome.OFFLINE:
        status, message = WARN, f"{where} offline: no answer within {ASK_SECONDS:g}s ({outcome.code})"
    elif outcome.state == host_outcome.UNTRUSTED:
        status, message = FAIL, f"{where} not asked ({outcome.code})"
    else:
        status, message = FAIL, f"{where} {outcome.state} ({outcome.code}): {outcome.message}"
    if not trusted:
        message += f"; this home trusts no key for it (`hermes mesh keys import --host {host.name}`)"
    detail = {
        "host": host.name,
        "service": key,
        "address": host.address,
        "port": port,
        "state": outcome.state,
        "code": outcome.code,
        "trusted": trusted,
    }
    return Check(f"host {host.name}: {key}", status, message, detail)
