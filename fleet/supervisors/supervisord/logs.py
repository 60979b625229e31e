"""The end of a mesh log, bounded, for the errors that explain why something did not start."""

from __future__ import annotations

import os
from pathlib import Path

LOG_TAIL_BYTES = 2000


def log_tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - LOG_TAIL_BYTES))
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""
