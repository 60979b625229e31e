"""Which home the environment names: ``$HERMES_HOME`` (or ``~/.hermes``) read as the install's
root home and the profile active in it.

Every ``hermes`` command resolves the root home as it starts (the owed-restart warning), so
the resolution is string work with ``os`` alone (``root_home_path``), spelled as ``pathlib``
spells it; ``re`` is imported only to judge a home under ``profiles/``, and ``pathlib`` only
by the callers that want a Path. ``shared.homes`` builds the rest of home and profile
resolution on it.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing's own flag without importing typing; mypy reads it as true
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

HOME_ENV = "HERMES_HOME"
# A profile's name, matched whole; compiled only when a home under profiles/ is judged.
PROFILE_NAME = r"[a-z0-9][a-z0-9_-]{0,63}"
# The default profile is the root home itself, so the name is never a directory under profiles/.
DEFAULT_PROFILE = "default"


def is_named_profile(name: str) -> bool:
    """Whether ``name`` is a profile that lives under ``profiles/`` (any valid name but the default)."""
    import re

    return name != DEFAULT_PROFILE and re.fullmatch(PROFILE_NAME, name) is not None


def _user_home(env: Mapping[str, str]) -> str:
    return env.get("HOME") or os.path.expanduser("~")


def _absolute_parts(path: str) -> tuple[str, list[str]]:
    """(root, parts) of ``path`` made absolute as ``Path.absolute`` makes it: prefixed with
    the working directory when relative, without empty or ``.`` parts, ``..`` kept."""
    if not path.startswith("/"):
        path = os.getcwd() + "/" + path
    stripped = path.lstrip("/")
    root = "//" if len(path) - len(stripped) == 2 else "/"  # POSIX keeps a leading "//"
    return root, [part for part in stripped.split("/") if part and part != "."]


def resolve_path(env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """``resolve`` with the root home as a string, spelled as ``str(Path)`` spells it."""
    env = os.environ if env is None else env
    raw = env.get(HOME_ENV, "")
    if not raw:
        root, parts = _absolute_parts(_user_home(env))
        return root + "/".join([*parts, ".hermes"]), DEFAULT_PROFILE
    if raw == "~" or raw.startswith("~/"):
        home_root, home_parts = _absolute_parts(_user_home(env))
        raw = home_root + "/".join(home_parts) + raw[1:]
    # Deliberately not resolved: the user's spelling of the path is what they see in messages.
    root, parts = _absolute_parts(os.path.expanduser(raw))
    if len(parts) >= 2 and parts[-2] == "profiles" and is_named_profile(parts[-1]):
        return root + "/".join(parts[:-2]), parts[-1]
    return root + "/".join(parts), DEFAULT_PROFILE


def resolve(env: Mapping[str, str] | None = None) -> tuple[Path, str]:
    """(the root home, the active profile) that ``env`` (default: ``os.environ``) names."""
    from pathlib import Path

    root, profile = resolve_path(env)
    return Path(root), profile


def root_home_path(env: Mapping[str, str] | None = None) -> str:
    """``root_home`` as a string, for a start-up path that needs no Path."""
    return resolve_path(env)[0]


def root_home(env: Mapping[str, str] | None = None) -> Path:
    """The install's root home: ``$HERMES_HOME`` (or ``~/.hermes``) with any profile suffix removed."""
    return resolve(env)[0]
