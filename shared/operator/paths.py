"""Where the operator integration keeps its state: the package registry, the policies, the
trust anchor and the daemon's default endpoint, all under one owner-private directory."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

STATE_ENV = "POHUNEK_STATE_DIR"
ANCHOR_ENV = "POHUNEK_TRUST_ANCHOR"


def pohunek_state(env: Mapping[str, str] | None = None) -> Path:
    """``$POHUNEK_STATE_DIR``, else ``$XDG_STATE_HOME/pohunek``, else ``~/.local/state/pohunek``."""
    env = os.environ if env is None else env
    if env.get(STATE_ENV):
        return Path(env[STATE_ENV])
    if env.get("XDG_STATE_HOME"):
        return Path(env["XDG_STATE_HOME"]) / "pohunek"
    return Path(env.get("HOME") or Path.home()) / ".local" / "state" / "pohunek"


def plugins_dir(state: Path) -> Path:
    return state / "plugins"


def integrations_dir(state: Path) -> Path:
    return state / "integrations"


def trust_anchor_path(state: Path, env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env[ANCHOR_ENV]) if env.get(ANCHOR_ENV) else state / "trust" / "anchor.json"


def default_daemon_endpoint(state: Path) -> str:
    return f"ipc://{state}/run/pohunekd.ctl"
