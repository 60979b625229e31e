"""A helper process of the demo (a simulator), started until its first line."""

from __future__ import annotations

import subprocess
from pathlib import Path

from shared.spawn import first_line

START_TIMEOUT = 30.0


def start(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """The process and the first line it printed ("" when none came in time)."""
    process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return process, first_line(process, START_TIMEOUT)
