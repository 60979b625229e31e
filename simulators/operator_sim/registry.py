"""Hosts and their sessions, name resolution and the origin-session guard. No I/O.

Hosts are named when the daemon starts and only then: nothing is discovered. A session is
found by its id or by an exact name that exactly one session on that host carries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from shared.operator.protocol import ORIGIN_DAEMON_ONLY, ORIGIN_DENIED, Code
from shared.protocol import RemoteError
from simulators.operator_sim.sessions import Session


class Registry:
    def __init__(self, hosts: Iterable[str]):
        self._hosts: dict[str, dict[str, Session]] = {name: {} for name in hosts}
        self.down: set[str] = set()  # hosts that answer host_unreachable (a fault on request)

    @property
    def hosts(self) -> list[str]:
        return list(self._hosts)

    def host(self, name: str) -> dict[str, Session]:
        if name not in self._hosts:
            raise RemoteError(
                Code.HOST_UNKNOWN, f"no host {name!r} is configured", detail={"host": name, "known": self.hosts}
            )
        if name in self.down:
            raise RemoteError(Code.HOST_UNREACHABLE, f"host {name!r} does not answer", detail={"host": name})
        return self._hosts[name]

    def add(self, session: Session) -> None:
        self.host(session.host)[session.id] = session

    def remove(self, session: Session) -> None:
        self._hosts[session.host].pop(session.id, None)

    def sessions(self, host: str, name: str | None = None) -> list[Session]:
        found = sorted(self.host(host).values(), key=lambda s: s.created_at)
        return [s for s in found if name is None or s.name == name]

    def find(self, host: str, ref: str) -> Session:
        """The one session ``ref`` names on ``host``: its id, else its exact, unique name."""
        sessions = self.host(host)
        if ref in sessions:
            return sessions[ref]
        named = [s for s in sessions.values() if s.name == ref]
        if len(named) == 1:
            return named[0]
        if named:
            raise RemoteError(
                Code.SESSION_AMBIGUOUS,
                f"{len(named)} sessions on {host!r} are named {ref!r}: use an id",
                detail={"session": ref, "ids": sorted(s.id for s in named)},
            )
        raise RemoteError(Code.SESSION_NOT_FOUND, f"no session {ref!r} on {host!r}", detail={"session": ref})

    def by_id(self, session_id: str) -> Session | None:
        """The session with this id on any host (lifecycle reports do not name a host)."""
        for sessions in self._hosts.values():
            if session_id in sessions:
                return sessions[session_id]
        return None

    def all(self) -> list[Session]:
        return [s for sessions in self._hosts.values() for s in sessions.values()]


def guard(method: str, target: Session, args: Mapping[str, Any], daemon_id: str) -> None:
    """Refuse a self-targeting call: ``method`` against the session hosting the caller.

    An origin is this daemon's session only when both markers match; another daemon's session
    of the same id is someone else's. Reads and the three lifecycle reports are never refused.
    """
    if method not in ORIGIN_DENIED and method not in ORIGIN_DAEMON_ONLY:
        return
    if args.get("origin_session_id") == target.id and args.get("origin_daemon_id") == daemon_id:
        raise RemoteError(
            Code.SELF_TARGET_DENIED,
            f"{method} may not target the session that hosts the caller",
            detail={"method": method, "session_id": target.id},
        )
