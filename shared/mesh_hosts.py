"""The other hosts one home sees: each a mesh of its own, named in the root home's config.

    mesh:
      hosts:
        east:
          address: 10.0.0.2          # where its services are reached (a name or an address)
          services:                  # service key -> control port; events are on the next one
            gateway: 7420
            gateway@coder: 7422
            auth_worker: 7430

A host is another install (its own install id, sign-in and hook intake) whose services this
home calls over CURVE TCP with its own client key, which that host authorizes. The public keys
this home trusts for a host's services are in the key store under ``hosts/<host>/``
(``shared.transport.curve_keys``), one set per host, so two hosts may both have a ``gateway``.
``hermes mesh keys import --host`` writes both the keys and this entry. The keys stay in the
store and not in this file: the store's rules (private, ours, no links) guard what is trusted.

A profile is named on its host: ``coder`` on host ``east`` is ``east:coder`` wherever a host
must be told apart (``qualified``).

The config file is parsed only when its text mentions ``hosts:`` (``shared.config_text``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, NamedTuple

from shared import config_text
from shared.errors import TransportError
from shared.homes import Endpoint
from shared.layout import CONFIG_FILE
from shared.mesh_tcp import TcpAddress

# A host's name: what a key store's directory and a qualified profile are spelled with.
HOST_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_ADDRESS = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}")
_SERVICE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}(@[a-z0-9][a-z0-9_-]{0,63})?")
# What separates a host from a profile in a qualified name: never in either.
SEPARATOR = ":"
# What the views call this install in their HOST column: no other host may be named so.
LOCAL = "local"
# The most hosts one home names: every view asks each of them, and each is a thread in the
# fleet view. Ten times the fleet the docs size for.
MAX_HOSTS = 500
MAX_SERVICES = 256
GATEWAY = "gateway"


class MeshHostsInvalid(TransportError):
    code = "mesh_hosts_invalid"


class MeshHostUnknown(TransportError):
    code = "mesh_host_unknown"


class Host(NamedTuple):
    name: str
    address: str
    services: dict[str, int]  # service key -> control port

    def gateways(self) -> dict[str, int]:
        """profile -> control port of every gateway the host names."""
        return {profile_of(key): port for key, port in self.services.items() if is_gateway(key)}


def is_gateway(key: str) -> bool:
    return key == GATEWAY or key.startswith(GATEWAY + "@")


def profile_of(gateway_key: str) -> str:
    """The profile whose gateway has key ``gateway_key`` (``gateway@coder`` -> ``coder``)."""
    return gateway_key.partition("@")[2] or "default"


def qualified(host: str, profile: str) -> str:
    """A profile as named across hosts: ``east:coder``; a local profile keeps its bare name."""
    return f"{host}{SEPARATOR}{profile}" if host else profile


def validate_host_name(name: object, where: str = "host") -> str:
    if not isinstance(name, str) or not HOST_NAME_RE.fullmatch(name) or name == LOCAL:
        raise MeshHostsInvalid(
            f"{where}: {name!r} is not a host name (a-z, 0-9, '_' and '-', at most 64; not {LOCAL!r}, "
            "which names this install)",
            detail={"field": where},
        )
    return name


def validate_address(address: object, where: str) -> str:
    if not isinstance(address, str) or not _ADDRESS.fullmatch(address):
        raise MeshHostsInvalid(f"{where}: {address!r} is not a host name or address", detail={"field": where})
    return address


def validate_port(port: object, where: str) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65534:
        raise MeshHostsInvalid(f"{where}: {port!r} is not a port 1-65534 (events use PORT+1)", detail={"field": where})
    return port


def parse(section: object, where: str) -> dict[str, Host]:
    """The hosts of a ``mesh.hosts`` section, every field checked; pure. ``where`` names the
    section in errors (the config file's path and key)."""
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise MeshHostsInvalid(f"{where} is not a mapping of HOST: {{address, services}}", detail={"field": where})
    if len(section) > MAX_HOSTS:
        raise MeshHostsInvalid(f"{where} names {len(section)} hosts; at most {MAX_HOSTS}", detail={"field": where})
    return {
        name: _host(validate_host_name(name, f"{where} key"), entry, f"{where}.{name}")
        for name, entry in section.items()
    }


def _host(name: str, entry: object, where: str) -> Host:
    if not isinstance(entry, dict):
        raise MeshHostsInvalid(f"{where} is not a mapping with address and services", detail={"field": where})
    unknown = sorted(set(map(str, entry)) - {"address", "services"})
    if unknown:
        raise MeshHostsInvalid(f"{where}.{unknown[0]} is not a host setting", detail={"field": f"{where}.{unknown[0]}"})
    address = validate_address(entry.get("address"), f"{where}.address")
    services = entry.get("services") or {}
    if not isinstance(services, dict) or len(services) > MAX_SERVICES:
        raise MeshHostsInvalid(
            f"{where}.services is not a mapping of at most {MAX_SERVICES} SERVICE: PORT",
            detail={"field": f"{where}.services"},
        )
    checked: dict[str, int] = {}
    for key, port in services.items():
        if not isinstance(key, str) or not _SERVICE.fullmatch(key):
            raise MeshHostsInvalid(
                f"{where}.services: {key!r} is not a service key", detail={"field": f"{where}.services"}
            )
        checked[key] = validate_port(port, f"{where}.services.{key}")
    return Host(name, address, checked)


def hosts(root: Path) -> dict[str, Host]:
    """Every host the install at ``root`` names, in the order its config names them."""
    try:
        section = config_text.mentioned_section(root, b"hosts", "mesh.hosts")
    except OSError as exc:
        raise MeshHostsInvalid(f"cannot read {root / CONFIG_FILE}: {exc.strerror or exc}") from None
    return parse(section, f"{Path(root) / CONFIG_FILE} key mesh.hosts")


def host(root: Path, name: str) -> Host:
    found = hosts(root).get(validate_host_name(name))
    if found is None:
        raise MeshHostUnknown(
            f"no host {name!r} in {Path(root) / CONFIG_FILE} (`hermes mesh keys import --host {name}` adds one)",
            detail={"host": name},
        )
    return found


def entry_of(host: Host) -> dict[str, Any]:
    """The config entry that names ``host``."""
    return {"address": host.address, "services": dict(host.services)}


def endpoint(root: Path, host: Host, key: str) -> Endpoint:
    """Where this home's clients reach service ``key`` of ``host``: CURVE TCP, trusting the key
    the store holds for that host's service. Nothing of it is on this host: no lock, no dir."""
    port = host.services.get(key)
    if port is None:
        raise MeshHostUnknown(
            f"host {host.name!r} names no service {key!r} (known: {', '.join(host.services) or 'none'})",
            detail={"host": host.name, "service": key},
        )
    tcp = TcpAddress(host.address, port)
    return Endpoint(
        service=key.partition("@")[0],
        directory=Path(),
        control=tcp.control,
        events=tcp.events,
        lock_path=Path(),
        fallback=False,
        key_name=key,
        root=Path(root).absolute(),
        tcp=tcp,
        host=host.name,
    )


def gateway_endpoints(root: Path) -> dict[str, Endpoint]:
    """Every gateway of every host ``root`` names, by its qualified profile (``east:coder``),
    host by host as the config names them: what the views that cover every host ask."""
    return {
        qualified(host.name, profile_of(key)): endpoint(root, host, key)
        for host in hosts(root).values()
        for key in host.services
        if is_gateway(key)
    }
