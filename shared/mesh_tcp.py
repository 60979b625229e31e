"""Which services bind, and are reached, on TCP instead of their ipc socket.

Named per service key (``updater``, ``gateway`` for the default profile's gateway,
``gateway@coder`` for profile ``coder``'s) in ``$HERMES_MESH_TCP``
(``"updater=tcp://0.0.0.0:7410,gateway@coder=tcp://10.0.0.2:7420"``) or in the root home's
``config.yaml`` under ``mesh: {tcp: {NAME: ADDRESS}}``; the environment wins name by name.
The address is the control socket's; events are on the next port. A wildcard host (``*``,
``0.0.0.0``) binds every interface and is connected to as 127.0.0.1; any other host is both
where the service binds and where clients connect, so one setting serves both hosts.

The config file is parsed (ruamel costs ~46 ms) only when its text mentions ``tcp://``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from shared import config_text
from shared.errors import TransportError
from shared.layout import CONFIG_FILE

TCP_ENV = "HERMES_MESH_TCP"
_ADDRESS = re.compile(r"tcp://(\*|[A-Za-z0-9][A-Za-z0-9.-]{0,252}):([0-9]{1,5})")
_WILDCARDS = ("*", "0.0.0.0")


class TcpConfigInvalid(TransportError):
    code = "mesh_tcp_invalid"


class TcpAddress(NamedTuple):
    host: str
    port: int  # the control socket's; events are on port + 1

    @property
    def bind_control(self) -> str:
        return f"tcp://{self.host}:{self.port}"

    @property
    def bind_events(self) -> str:
        return f"tcp://{self.host}:{self.port + 1}"

    @property
    def is_local(self) -> bool:
        """Bound on this host's loopback or every interface: its lock file is here."""
        return self.host in _WILDCARDS or self.host == "localhost" or self.host.startswith("127.")

    @property
    def _connect_host(self) -> str:
        return "127.0.0.1" if self.host in _WILDCARDS else self.host

    @property
    def control(self) -> str:
        return f"tcp://{self._connect_host}:{self.port}"

    @property
    def events(self) -> str:
        return f"tcp://{self._connect_host}:{self.port + 1}"


def parse_address(text: object, where: str) -> TcpAddress:
    match = _ADDRESS.fullmatch(text) if isinstance(text, str) else None
    port = int(match.group(2)) if match else 0
    if match is None or not 1 <= port <= 65534:
        raise TcpConfigInvalid(
            f"{where}: {text!r} is not tcp://HOST:PORT (PORT 1-65534; events use PORT+1)",
            detail={"where": where},
        )
    return TcpAddress(match.group(1), port)


def tcp_address(root: Path, name: str, env: Mapping[str, str] | None = None) -> TcpAddress | None:
    """The TCP address of service key ``name`` of install ``root``; None: it stays on ipc."""
    env = os.environ if env is None else env
    from_env = _env_entries(env.get(TCP_ENV, ""))
    if name in from_env:
        return parse_address(from_env[name], f"${TCP_ENV} entry {name}")
    configured = _config_entries(root)
    if name in configured:
        return parse_address(configured[name], f"{Path(root) / CONFIG_FILE} key mesh.tcp.{name}")
    return None


def configured_names(root: Path, env: Mapping[str, str] | None = None) -> list[str]:
    """Every service key named on TCP, by the environment or ``config.yaml``, sorted."""
    env = os.environ if env is None else env
    return sorted({*_env_entries(env.get(TCP_ENV, "")), *_config_entries(root)})


def _env_entries(raw: str) -> dict[str, str]:
    entries: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        name, sep, address = item.partition("=")
        if not sep or not name.strip():
            raise TcpConfigInvalid(f"${TCP_ENV}: {item!r} is not NAME=tcp://HOST:PORT")
        entries[name.strip()] = address.strip()
    return entries


def _config_entries(root: Path) -> dict[str, Any]:
    try:
        section = config_text.mentioned_section(root, b"tcp://", "mesh.tcp")
    except OSError as exc:
        raise TcpConfigInvalid(f"cannot read {root / CONFIG_FILE}: {exc.strerror or exc}") from None
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise TcpConfigInvalid(f"{root / CONFIG_FILE}: mesh.tcp is not a mapping of NAME: tcp://HOST:PORT")
    return section
