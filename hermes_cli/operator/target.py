"""Which Hermes home an integration command acts on, and where its plugin and policy live.

A target is a profile (``default`` selected explicitly, or a named one that exists) or a custom
absolute home; never both. A custom home must be an owner-private real directory, and neither
``/`` nor the user's home. The policy lives outside the home, under the integration state, in a
directory named by a digest of the home's path, so no file of the home can reach it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared import homes
from shared.errors import HermesError
from shared.operator import paths
from shared.plugin_host import PLUGINS_DIR

PLUGIN_NAME = "pohunek"
POLICY_FILE = "policy.json"


class TargetRefused(HermesError):
    """The target is missing, ambiguous or unsafe; nothing was looked at inside it."""

    code = "hermes_target_invalid"


@dataclass(frozen=True)
class Target:
    kind: str  # "profile" or "home"
    profile: str | None
    home: Path

    @property
    def plugin_root(self) -> Path:
        return self.home / PLUGINS_DIR / PLUGIN_NAME

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "hermes_home": str(self.home)}
        if self.profile is not None:
            out["profile"] = self.profile
        return out


def _refuse(message: str, reason: str) -> TargetRefused:
    return TargetRefused(message, detail={"reason": reason})


def resolve(profile: str | None, home: str | None) -> Target:
    """The target the flags name; exactly one of them must be given."""
    if (profile is None) == (home is None):
        raise _refuse("name the target: --hermes-profile NAME (default included) or --hermes-home ABS", "no_target")
    if profile is not None:
        homes.validate_profile_name(profile)
        path = homes.profile_home(profile, must_exist=True)
        if not path.is_dir():
            raise _refuse(f"the {profile} profile's home does not exist", "missing")
        _owned_real_dir(path, private=False)
        return Target("profile", profile, path)
    assert home is not None
    if not os.path.isabs(home) or "\x00" in home:
        raise _refuse("--hermes-home must be an absolute path", "relative")
    path = Path(os.path.normpath(home))
    if path == Path("/") or path == Path.home():
        raise _refuse("--hermes-home may be neither / nor your home directory", "too_broad")
    _owned_real_dir(path, private=True)
    return Target("home", None, path)


def _owned_real_dir(path: Path, *, private: bool) -> None:
    try:
        info = os.lstat(path)
    except OSError:
        raise _refuse("the Hermes home does not exist", "missing") from None
    if stat.S_ISLNK(info.st_mode):
        raise _refuse("the Hermes home is a symlink", "symlink")
    if not stat.S_ISDIR(info.st_mode):
        raise _refuse("the Hermes home is not a directory", "not_a_directory")
    if info.st_uid != os.getuid():
        raise _refuse("the Hermes home belongs to another user", "owner")
    if private and info.st_mode & 0o077:
        raise _refuse("a custom Hermes home must be private to you (chmod 700)", "permissions")


def policy_path(state: Path, target: Target) -> Path:
    digest = hashlib.sha256(os.fsencode(target.home)).hexdigest()[:16]
    return paths.integrations_dir(state) / "hermes" / digest / POLICY_FILE
