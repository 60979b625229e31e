"""Skins as a user writes them, and the colour a skin's painter puts on a terminal."""

from __future__ import annotations


def write_skin(home, name, text):
    (home / "skins").mkdir(exist_ok=True)
    path = home / "skins" / f"{name}.yaml"
    path.write_text(text)
    return path


def escape(color: str) -> str:
    red, green, blue = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"\033[38;2;{red};{green};{blue}m"
