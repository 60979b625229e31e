"""Whether a home's ``config.yaml`` can hold a setting at all, told from its raw text.

Parsing it means importing ruamel (about 46 ms), which a command that only prints or asks a
socket should not pay for an install whose config never names the setting. A file that does
mention it is parsed as usual, and judged there.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from shared.layout import CONFIG_FILE

# The most of the file read here; ``shared.config`` refuses larger files when it parses them.
_PEEK_BYTES = 1 << 20


def mentions(home: Path, needle: bytes) -> bool:
    """``needle`` occurs in ``home``'s config file; False when there is no file. ``OSError``
    when the file is there but cannot be read: the caller says what that means."""
    try:
        with open(os.path.join(home, CONFIG_FILE), "rb") as f:
            return needle in f.read(_PEEK_BYTES + len(needle))
    except FileNotFoundError:
        return False


def mentioned_section(home: Path, needle: bytes, key: str) -> Any:
    """The value at dotted ``key`` of ``home``'s config, parsed only when its text mentions
    ``needle``; None when it cannot hold it. ``OSError`` when the file cannot be read."""
    if not mentions(home, needle):
        return None
    from shared import config

    return config.get(config.load_config(home), key, None)
