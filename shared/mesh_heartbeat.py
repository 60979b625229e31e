"""How often a TCP connection of the mesh proves its peer is still there (ZMTP heartbeats).

Three settings, in seconds, in the root home's ``config.yaml`` under
``mesh: {heartbeat: {interval, timeout, ttl}}`` or in ``$HERMES_MESH_HEARTBEAT``
(``"interval=2,timeout=6,ttl=6"``); the environment wins field by field, and a field named in
neither keeps its default:

- ``interval``: a socket sends a PING this often.
- ``timeout``: a connection whose PING has had no traffic back this long is dropped.
- ``ttl``: the peer drops the connection when it has heard nothing from this side this long
  (it must be longer than ``interval``, or an idle, healthy connection would be cut).

The defaults (2 s, 6 s, 6 s) notice a dead peer or link within 6 to 8 s, where a call would
otherwise wait out its deadline and an idle connection TCP keepalive's 2 hours; three intervals
of slack keep a healthy connection whose answer a congested link or a few lost segments delay.
A PING is a few dozen bytes every 2 s per open connection.

The config file is parsed only when its text mentions ``heartbeat``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from shared import config_text
from shared.errors import TransportError
from shared.layout import CONFIG_FILE

HEARTBEAT_ENV = "HERMES_MESH_HEARTBEAT"
# libzmq counts the TTL it sends in tenths of a second, up to 6553.5 s.
LOWEST, HIGHEST = 0.1, 3600.0


class HeartbeatConfigInvalid(TransportError):
    code = "mesh_heartbeat_invalid"


class Heartbeat(NamedTuple):
    interval: float = 2.0
    timeout: float = 6.0
    ttl: float = 6.0


FIELDS = Heartbeat._fields


def heartbeat(root: Path, env: Mapping[str, str] | None = None) -> Heartbeat:
    """The heartbeat settings of install ``root``; ``HeartbeatConfigInvalid`` naming the field."""
    env = os.environ if env is None else env
    where = {name: f"{Path(root) / CONFIG_FILE} key mesh.heartbeat.{name}" for name in FIELDS}
    given: dict[str, Any] = dict(_config_entries(root))
    from_env = _env_entries(env.get(HEARTBEAT_ENV, ""))
    given.update(from_env)
    where.update({name: f"${HEARTBEAT_ENV} entry {name}" for name in from_env})
    settings = Heartbeat(**{name: _seconds(value, name, where[name]) for name, value in given.items()})
    if settings.ttl <= settings.interval:
        raise HeartbeatConfigInvalid(
            f"{where['ttl']}: ttl {settings.ttl:g} s must be longer than interval {settings.interval:g} s",
            detail={"field": "ttl"},
        )
    return settings


def _seconds(value: object, name: str, where: str) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not number or not LOWEST <= value <= HIGHEST:  # type: ignore[operator]
        raise HeartbeatConfigInvalid(
            f"{where}: {value!r} is not a number of seconds from {LOWEST:g} to {HIGHEST:g}", detail={"field": name}
        )
    return float(value)  # type: ignore[arg-type]


def _env_entries(raw: str) -> dict[str, str]:
    entries: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in FIELDS:
            raise HeartbeatConfigInvalid(
                f"${HEARTBEAT_ENV}: {item!r} is not FIELD=SECONDS (FIELD one of {', '.join(FIELDS)})",
                detail={"field": name or None},
            )
        entries[name] = value.strip()
    return entries


def _config_entries(root: Path) -> dict[str, Any]:
    try:
        section = config_text.mentioned_section(root, b"heartbeat", "mesh.heartbeat")
    except OSError as exc:
        raise HeartbeatConfigInvalid(f"cannot read {root / CONFIG_FILE}: {exc.strerror or exc}") from None
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise HeartbeatConfigInvalid(
            f"{root / CONFIG_FILE}: mesh.heartbeat is not a mapping of {', '.join(FIELDS)}",
            detail={"field": None},
        )
    unknown = sorted(str(name) for name in section if name not in FIELDS)
    if unknown:
        raise HeartbeatConfigInvalid(
            f"{root / CONFIG_FILE}: mesh.heartbeat has no setting {unknown[0]!r} (only {', '.join(FIELDS)})",
            detail={"field": unknown[0]},
        )
    return section
