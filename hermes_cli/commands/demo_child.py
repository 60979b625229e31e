"""A helper process of the demo (a simulator): started until its first line, stopped for sure."""

from __future__ import annotations

import selectors
import subprocess
from pathlib import Path

START_TIMEOUT = 30.0


def start(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """The process and the first line it printed ("" when none came in time)."""
    process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    with selectors.DefaultSelector() as sel:
        sel.register(process.stdout, selectors.EVENT_READ)
        line = process.stdout.readline().strip() if sel.select(START_TIMEOUT) else ""
    return process, line


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
