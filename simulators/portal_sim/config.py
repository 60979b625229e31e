"""The simulator's settings, changed at run time through ``POST /_sim/config``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from simulators.portal_sim.errors import invalid_request

TIERS = ("free", "plus", "pro")
_SECONDS = ("interval", "slow_down_step", "device_ttl", "access_ttl")
_MAX_SECONDS = 10**9  # keeps every derived time a finite float


def _default_recommended() -> dict[str, str]:
    return {"free": "Hermes-4-14B", "plus": "Hermes-4-70B", "pro": "Hermes-4-405B"}


@dataclass
class Config:
    interval: float = 5
    slow_down_step: float = 5
    device_ttl: float = 900
    access_ttl: float = 3600
    recommended: dict[str, str] = field(default_factory=_default_recommended)
    clients: list[str] = field(default_factory=lambda: ["hermes-cli"])

    def update(self, changes: dict[str, Any]) -> None:
        """Apply a partial update; nothing changes unless every given value is valid."""
        unknown = sorted(set(changes) - {*_SECONDS, "recommended", "clients"})
        if unknown:
            raise invalid_request(f"unknown settings: {', '.join(unknown)}")
        for name in _SECONDS:
            if name in changes:
                _check_seconds(name, changes[name])
        recommended = changes.get("recommended", {})
        if not isinstance(recommended, dict) or not set(recommended) <= set(TIERS):
            raise invalid_request(f"recommended must map some of {', '.join(TIERS)} to model names")
        if not all(_is_name(model) for model in recommended.values()):
            raise invalid_request("recommended model names must be non-empty strings")
        clients = changes.get("clients", self.clients)
        if not isinstance(clients, list) or not all(_is_name(client) for client in clients):
            raise invalid_request("clients must be a list of non-empty strings")
        for name in _SECONDS:
            if name in changes:
                setattr(self, name, changes[name])
        self.recommended = {**self.recommended, **recommended}
        self.clients = list(dict.fromkeys(clients))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _check_seconds(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise invalid_request(f"{name} must be a number")
    if not 0 <= value <= _MAX_SECONDS:  # also false for NaN
        raise invalid_request(f"{name} must be between 0 and {_MAX_SECONDS}")


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())
