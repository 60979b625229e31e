"""Which services of a home are running, read from their endpoint locks.

A running service holds its endpoint's lock for as long as it lives (the kernel drops
the lock with the process), so probing the lock answers "is it live?" without a scan and
without talking to the service.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shared import homes
from shared.locks import LockStatus, probe


@dataclass(frozen=True)
class ServiceState:
    service: str
    endpoint: homes.Endpoint
    lock: LockStatus

    @property
    def live(self) -> bool:
        return self.lock.held

    def to_dict(self) -> dict:
        holder = self.lock.holder
        return {
            "service": self.service,
            "live": self.live,
            "pid": holder.pid if (holder and self.live) else None,
            "control": self.endpoint.control,
            "fallback_dir": self.endpoint.fallback,
        }


def services_of(home: Path, *, is_root: bool) -> list[str]:
    """The services bound in ``home``: per-profile ones everywhere, install-wide ones in the root."""
    return [name for name, scope in homes.SERVICES.items() if scope == "profile" or is_root]


def service_states(home: Path, *, is_root: bool) -> list[ServiceState]:
    states = []
    for service in services_of(home, is_root=is_root):
        ep = homes.endpoint(home, service, create=False)
        states.append(ServiceState(service, ep, probe(ep.lock_path)))
    return states
