"""Real ``systemctl`` output of systemd 252, captured (``fixtures/systemd/``, see its README):
what the systemd double and the parsers are held to."""

from __future__ import annotations

from typing import NamedTuple

from tests.support import FIXTURES

CAPTURES = FIXTURES / "systemd"


class Block(NamedTuple):
    command: str
    output: list[str]
    exit_code: int = 0  # a command the capture shows no ``(exit N)`` for exited 0


def transcript(name: str) -> list[Block]:
    """A capture file as (command, output lines, exit code) blocks."""
    blocks: list[Block] = []
    for line in (CAPTURES / name).read_text().splitlines():
        if line.startswith("$ "):
            blocks.append(Block(line[2:], []))
        elif line.startswith("(exit ") and line.endswith(")"):
            blocks[-1] = blocks[-1]._replace(exit_code=int(line[6:-1]))
        else:
            blocks[-1].output.append(line)
    return blocks
