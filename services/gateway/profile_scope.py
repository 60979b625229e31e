"""The profile an activity runs for: its home, its config and its secrets, bound in a context
variable for exactly that activity (a turn, a drain's answer, anything a served profile does).

A multiplex gateway serves several profiles from one process, so nothing a turn needs may
come from what the process shares: ``os.environ`` (``HERMES_HOME`` and every variable in it
stay the launch profile's) or a module constant derived from a home (frozen to the launch
profile at import). Inside an activity everything profile-scoped is read from ``current()``;
outside one, ``current()`` raises ``Unscoped`` rather than guess.

Secrets fail closed. A profile's secrets are its home's ``.env``; the launch profile (the one
``HERMES_HOME`` names) also has the environment it was started with, frozen at start, since a
supervisor's unit may pass its keys that way. A profile that is not the launch profile never
sees the launch environment: a miss in its scope is a miss, never a read of ``os.environ``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from services.gateway import dotenv
from shared import config
from shared.homes import ProfileError
from shared.layout import SECRETS_FILE


class Unscoped(ProfileError):
    code = "profile_unscoped"


@dataclass(frozen=True)
class ProfileScope:
    profile: str
    home: Path
    config: Mapping[str, Any]
    _secrets: Mapping[str, str] = field(repr=False)

    def secret(self, name: str) -> str | None:
        """The value of secret ``name`` in this profile, or None: never another profile's."""
        return self._secrets.get(name)

    def fingerprint(self, name: str) -> str | None:
        """A short digest that tells two values of secret ``name`` apart without showing either."""
        value = self.secret(name)
        return None if value is None else "sha256:" + hashlib.sha256(value.encode()).hexdigest()[:16]


def load(profile: str, home: Path, *, launch_env: Mapping[str, str] | None = None) -> ProfileScope:
    """Read the scope of ``profile`` from its ``home`` (blocking). ``launch_env``: the
    environment the process started with, given for the launch profile only.

    Raises ``config.ConfigError`` or ``dotenv.DotenvInvalid`` for a file that cannot be read."""
    home = Path(home)
    secrets = dict(launch_env or {})
    secrets.update(_read_secrets(home))
    return ProfileScope(profile, home, MappingProxyType(config.load_config(home)), MappingProxyType(secrets))


def _read_secrets(home: Path) -> dict[str, str]:
    path = home / SECRETS_FILE
    try:
        with open(path, "rb") as f:
            raw = f.read(dotenv.MAX_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise dotenv.DotenvInvalid(f"cannot read {path}: {exc.strerror or exc}", detail={"source": str(path)}) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise dotenv.DotenvInvalid(f"{path} is not UTF-8", detail={"source": str(path)}) from None
    return dotenv.parse(text, source=str(path))


_ACTIVE: ContextVar[ProfileScope | None] = ContextVar("hermes_profile_scope", default=None)


def current() -> ProfileScope:
    """The scope of the activity running now; Unscoped when none is bound."""
    scope = _ACTIVE.get()
    if scope is None:
        raise Unscoped("no profile is bound to this activity; profile-scoped state cannot be read here")
    return scope


def log_fields() -> dict[str, str | None]:
    """What a log record says of the activity running now: its profile, or None outside one."""
    scope = _ACTIVE.get()
    return {"profile": None if scope is None else scope.profile}


@contextmanager
def bound(scope: ProfileScope) -> Iterator[ProfileScope]:
    """Run the block as an activity of ``scope``'s profile (the context variable is per task,
    and trio's threads run in a copy of their task's context)."""
    token = _ACTIVE.set(scope)
    try:
        yield scope
    finally:
        _ACTIVE.reset(token)
