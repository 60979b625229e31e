"""Homes as the tests lay them out: a profile's home with its run dir, and a home so deep
that its ipc socket paths cannot fit."""

from __future__ import annotations

import os
from pathlib import Path

from shared import homes
from shared.homes import IPC_PATH_MAX


def make_profile(root: Path, name: str) -> Path:
    home = homes.profile_home(name, root)
    home.mkdir(parents=True, exist_ok=True)
    homes.ensure_run_dir(home)
    return home


def deep_home(tmp_path: Path) -> Path:
    home = tmp_path / ("d" * 60) / ("e" * 60)
    assert len(os.fsencode(home / "run" / "gateway.ctl")) > IPC_PATH_MAX
    return home
