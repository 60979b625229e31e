"""What an atomic write may leave behind."""

from __future__ import annotations

from pathlib import Path


def temp_leftovers(directory: Path) -> list[str]:
    """The temporary files an atomic write left in ``directory`` (none, when it cleaned up)."""
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))
