"""Asking the other hosts this home sees (``shared.mesh_hosts``): one op to many of their
services at once, within one bound, each outcome judged (``host_outcome``); and making sure one
host's service answers before a long call is made to it.

Every host is asked in the same round, so a host that is down costs the bound once, not once
per host. Nothing is started on another host: its services are its own install's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hermes_cli.host_outcome import Outcome, judge
from shared import homes, mesh_hosts
from shared.errors import HermesError, TransportError
from shared.protocol import OpSpec

# How long every host has to answer one round (a CURVE handshake and a small answer).
ASK_SECONDS = 5.0


class HostOffline(TransportError):
    """Another host's service did not answer within the bound: down, cut off, or stopped."""

    code = "host_offline"


def ask_all(
    root: Path,
    targets: Iterable[tuple[mesh_hosts.Host, str]],
    spec: OpSpec,
    args: Mapping[str, Any] | None = None,
    *,
    timeout: float = ASK_SECONDS,
) -> dict[tuple[str, str], Outcome]:
    """(host, service key) -> how asking it ``spec`` ended, every target at once within ``timeout``.
    A service whose key this home does not hold is not asked (``untrusted``)."""
    from shared.transport import call_all, curve  # pyzmq comes with them

    outcomes: dict[tuple[str, str], Outcome] = {}
    addresses: dict[tuple[str, str], str] = {}
    options: dict[str, Any] = {}
    for host, key in targets:
        endpoint = mesh_hosts.endpoint(root, host, key)
        try:
            options[endpoint.control] = curve.client_options(endpoint)
        except HermesError as exc:  # no key held for it, or none that is safe to use
            outcomes[(host.name, key)] = judge(exc)
            continue
        addresses[(host.name, key)] = endpoint.control
    if not addresses:
        return outcomes
    # Two names for one address are asked once: one socket per address.
    answers = call_all(list(dict.fromkeys(addresses.values())), spec, args, timeout=timeout, options=options)
    for target, address in addresses.items():
        outcomes[target] = judge(answers[address])
    return outcomes


def reach(root: Path, host: str, key: str, *, timeout: float = ASK_SECONDS) -> homes.Endpoint:
    """The endpoint of ``host``'s service ``key``, once it answered a hello within ``timeout``:
    ``HostOffline`` when it did not, the handshake's typed error when it was refused."""
    from hermes_cli.service_client import answers

    endpoint = mesh_hosts.endpoint(root, mesh_hosts.host(root, host), key)
    if not answers(endpoint, timeout):
        raise HostOffline(
            f"host {host!r}: its {key} at {endpoint.control} did not answer within {timeout:g}s "
            "(the host is down or cut off, or the service is stopped there)",
            detail={"host": host, "service": key, "control": endpoint.control},
        )
    return endpoint
