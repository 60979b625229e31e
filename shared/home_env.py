"""Which home the environment names: ``$HERMES_HOME`` (or ``~/.hermes``) read as the install's
root home and the profile active in it.

Every ``hermes`` command resolves the root home as it starts (the owed-restart warning), so
this module imports nothing heavier than ``re`` and ``pathlib``; ``shared.homes`` builds the
rest of home and profile resolution on it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

HOME_ENV = "HERMES_HOME"
# A profile's name, matched whole; compiled only when a home under profiles/ is judged.
PROFILE_NAME = r"[a-z0-9][a-z0-9_-]{0,63}"
# The default profile is the root home itself, so the name is never a directory under profiles/.
DEFAULT_PROFILE = "default"


def is_named_profile(name: str) -> bool:
    """Whether ``name`` is a profile that lives under ``profiles/`` (any valid name but the default)."""
    return name != DEFAULT_PROFILE and re.fullmatch(PROFILE_NAME, name) is not None


def _user_home(env: Mapping[str, str]) -> Path:
    home = env.get("HOME")
    return Path(home) if home else Path.home()


def resolve(env: Mapping[str, str] | None = None) -> tuple[Path, str]:
    """(the root home, the active profile) that ``env`` (default: ``os.environ``) names."""
    env = os.environ if env is None else env
    raw = env.get(HOME_ENV, "")
    if not raw:
        return (_user_home(env) / ".hermes").absolute(), DEFAULT_PROFILE
    if raw == "~" or raw.startswith("~/"):
        raw = str(_user_home(env)) + raw[1:]
    # Deliberately not resolved: the user's spelling of the path is what they see in messages.
    home = Path(os.path.expanduser(raw)).absolute()
    if home.parent.name == "profiles" and is_named_profile(home.name):
        return home.parent.parent, home.name
    return home, DEFAULT_PROFILE


def root_home(env: Mapping[str, str] | None = None) -> Path:
    """The install's root home: ``$HERMES_HOME`` (or ``~/.hermes``) with any profile suffix removed."""
    return resolve(env)[0]
