"""Which Hermes home an integration command acts on, and where its plugin and policy live.

A target is a profile (``default`` selected explicitly, or a named one that exists) or a custom
absolute home; never both. Its home must be a real directory of yours (a custom one also
private), and neither ``/`` nor your home, judged by identity (device and inode), so no
spelling (``//home/me``, a symlinked parent) reaches either. The target records the home's
real path: every spelling of one home names one target, one policy and one marker.

The plugin lives in ``<home>/plugins/operators/pohunek``, as the operator installs it; an
earlier installer's ``<home>/plugins/pohunek`` is still found. The policy lives outside the home, under the integration state, in a directory named by a
digest of the home's real path, so no file of the home can reach it. Install and update refuse
a home that holds that directory (the state under the home, or the home its ancestor).
"""

from __future__ import annotations

import hashlib
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_cli.operator.errors import IntegrationError
from hermes_cli.plugin_host import PLUGINS_DIR
from runtime_package import paths
from shared import homes

PLUGIN_NAME = "pohunek"
# Where the operator installs it: Hermes's category directory, the plugin's key operators/pohunek.
CATEGORY = "operators"
POLICY_FILE = "policy.json"


class TargetRefused(IntegrationError):
    """The target is missing, ambiguous or unsafe; nothing was looked at inside it."""

    code = "hermes_target_invalid"


@dataclass(frozen=True)
class Target:
    kind: str  # "profile" or "home"
    profile: str | None
    home: Path  # its real path

    @property
    def plugin_root(self) -> Path:
        return self.home / PLUGINS_DIR / CATEGORY / PLUGIN_NAME

    @property
    def legacy_root(self) -> Path:
        """Where an earlier installer put it; the next install or update moves it."""
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
    if profile is not None and home is not None:
        raise _refuse("--hermes-profile and --hermes-home name two targets: give one", "two_targets")
    if profile is not None:
        homes.validate_profile_name(profile)
        path = homes.profile_home(profile, must_exist=True)
        if not path.is_dir():
            raise _refuse(f"the {profile} profile's home does not exist", "missing")
        return Target("profile", profile, _real_home(path, private=False))
    if home is None:
        raise _refuse("name the target: --hermes-profile NAME (default included) or --hermes-home ABS", "no_target")
    if not os.path.isabs(home) or "\x00" in home:
        raise _refuse("--hermes-home must be an absolute path", "relative")
    return Target("home", None, _real_home(Path(home), private=True))


def _identity(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino


def _too_broad() -> set[tuple[int, int]]:
    """The identities of ``/`` and of your home (``$HOME`` and the password database's)."""
    candidates = ["/", os.path.expanduser("~")]
    try:
        candidates.append(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:  # no entry for this uid (a container's): $HOME is all there is
        pass
    found = set()
    for candidate in candidates:
        try:
            found.add(_identity(os.stat(candidate)))
        except OSError:
            continue
    return found


def _real_home(path: Path, *, private: bool) -> Path:
    """The real path of ``path``: an owned real directory (private too, when asked), neither
    ``/`` nor your home."""
    try:
        info = os.lstat(path)
    except OSError:
        raise _refuse("the Hermes home does not exist", "missing") from None
    if stat.S_ISLNK(info.st_mode):
        raise _refuse("the Hermes home is a symlink", "symlink")
    if not stat.S_ISDIR(info.st_mode):
        raise _refuse("the Hermes home is not a directory", "not_a_directory")
    if _identity(info) in _too_broad():
        raise _refuse("the Hermes home may be neither / nor your home directory", "too_broad")
    if info.st_uid != os.getuid():
        raise _refuse("the Hermes home belongs to another user", "owner")
    if private and info.st_mode & 0o077:
        raise _refuse("a custom Hermes home must be private to you (chmod 700)", "permissions")
    real = Path(os.path.realpath(path))
    try:
        same = _identity(os.stat(real)) == _identity(info)
    except OSError:
        same = False
    if not same:  # a parent was swapped while it was judged
        raise _refuse("the Hermes home moved while it was checked", "moved")
    return real


def policy_path(state: Path, target: Target) -> Path:
    digest = hashlib.sha256(os.fsencode(target.home)).hexdigest()[:16]
    return paths.integrations_dir(state) / "hermes" / digest / POLICY_FILE


def policy_inside_home(state: Path, target: Target) -> bool:
    """Whether the home is the policy's directory or an ancestor of it: judged on its real path,
    by identity, so no spelling of the state (a symlink, ``XDG_STATE_HOME``) hides it."""
    try:
        home = _identity(os.stat(target.home))
    except OSError:
        return False
    here = Path(os.path.realpath(policy_path(state, target)))
    for directory in here.parents:
        try:
            if _identity(os.stat(directory)) == home:
                return True
        except OSError:
            continue  # not made yet
    return False


def require_policy_outside(state: Path, target: Target) -> None:
    """Install and update write the policy only where no file of the home can reach it."""
    if policy_inside_home(state, target):
        raise _refuse(
            "the integration state (POHUNEK_STATE_DIR, else XDG_STATE_HOME) is inside the Hermes home: "
            "the policy must live outside it; point POHUNEK_STATE_DIR elsewhere",
            "policy_inside_home",
        )
