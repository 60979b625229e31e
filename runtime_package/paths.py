"""Where the Pohunek state lives on this host: the state directory and the paths inside it.

One place computes them so the CLI, the registry and the tests agree. ``env`` defaults to the
process environment; an unset or empty variable falls through to the next choice.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

PLUGINS_SUBDIR = "plugins"
INTEGRATIONS_SUBDIR = "integrations"


def pohunek_state(env: Mapping[str, str] | None = None) -> Path:
    """``$POHUNEK_STATE_DIR``, else ``$XDG_STATE_HOME/pohunek``, else ``~/.local/state/pohunek``."""
    env = os.environ if env is None else env
    explicit = env.get("POHUNEK_STATE_DIR")
    if explicit:
        return Path(os.path.abspath(explicit))
    xdg = env.get("XDG_STATE_HOME")
    # The XDG spec says a relative value is invalid and must be ignored.
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "pohunek"
    home = env.get("HOME") or os.path.expanduser("~")
    return Path(home) / ".local" / "state" / "pohunek"


def plugins_dir(state: Path) -> Path:
    """The package registry's root, owned by ``runtime_package.registry``."""
    return Path(state) / PLUGINS_SUBDIR


def integrations_dir(state: Path) -> Path:
    return Path(state) / INTEGRATIONS_SUBDIR


def trust_anchor_path(state: Path, env: Mapping[str, str] | None = None) -> Path:
    """``$POHUNEK_TRUST_ANCHOR``, else ``<state>/trust/anchor.json``."""
    env = os.environ if env is None else env
    explicit = env.get("POHUNEK_TRUST_ANCHOR")
    if explicit:
        return Path(os.path.abspath(explicit))
    return Path(state) / "trust" / "anchor.json"


def default_daemon_endpoint(state: Path) -> str:
    """Where the session daemon listens when ``$POHUNEK_DAEMON_ENDPOINT`` does not say."""
    return f"ipc://{state}/run/pohunekd.ctl"
