"""The fleet view on a terminal, with curses.

curses because it is made for exactly this and comes with Python: it knows the terminal from
terminfo, follows a resize, reads keys, and sends only the cells that changed, which keeps a
view left open over SSH all day cheap for the terminal and for the host's CPU. It is drawn
again only when a row or the header moved, and once a second for the clock. ``q`` ends it.
"""

from __future__ import annotations

import curses
import sys
import time
from typing import Any

from fleet.health import UNHEALTHY
from hermes_cli import output
from hermes_cli.fleet_view import rows
from hermes_cli.fleet_view.view import FACTS_EVERY, Fleet, wait
from shared.gateways import ops

QUIT_KEYS = frozenset({ord("q"), ord("Q"), 27})  # 27: Esc
_RED, _YELLOW, _GREEN = 1, 2, 3


def show(fleet: Fleet) -> None:
    curses.wrapper(_loop, fleet)


def _loop(screen: Any, fleet: Fleet) -> None:
    curses.curs_set(0)
    screen.nodelay(True)
    if curses.has_colors():
        curses.use_default_colors()
        for pair, color in ((_RED, curses.COLOR_RED), (_YELLOW, curses.COLOR_YELLOW), (_GREEN, curses.COLOR_GREEN)):
            curses.init_pair(pair, color, -1)
    facts_due = time.monotonic() + FACTS_EVERY
    fleet.take()
    while True:
        _draw(screen, fleet)
        # Woken by a row, a key, or the next second of the clock.
        wait(fleet, 1.0 - time.time() % 1.0, sys.stdin.fileno())
        fleet.take()
        while (key := screen.getch()) != -1:
            if key in QUIT_KEYS:
                return
        if time.monotonic() >= facts_due:
            facts_due = time.monotonic() + FACTS_EVERY
            fleet.facts.refresh()


def _draw(screen: Any, fleet: Fleet) -> None:
    height, width = screen.getmaxyx()
    screen.erase()
    ordered = fleet.ordered()
    lines = [(text, curses.A_BOLD) for text in _header(fleet, ordered)]
    table = output.aligned(rows.HEADERS, [rows.cells(r, fleet.facts.sha, fleet.facts.owed) for r in ordered])
    lines.append(("", 0))
    lines.append((table[0], curses.A_REVERSE))
    lines.extend((text, _attribute(row)) for text, row in zip(table[1:], ordered, strict=True))
    for y, (text, attribute) in enumerate(lines[: height - 1]):
        screen.addnstr(y, 0, text, width - 1, attribute)
    screen.addnstr(height - 1, 0, "q quit", width - 1, curses.A_DIM)
    screen.refresh()


def _header(fleet: Fleet, ordered: list[dict[str, Any]]) -> list[str]:
    facts = fleet.facts.to_dict(time.time())
    sha = (facts["code_sha"] or "no commit")[:12]
    tally = ", ".join(f"{count} {state}" for state, count in sorted(rows.tally(ordered).items()))
    expires = facts["sign_in_expires_in"]
    sign_in = "not signed in" if expires is None else f"sign-in {_duration(expires)}"
    owed = [f"{len(facts['owed'])} restart{'s' if len(facts['owed']) != 1 else ''} owed"] if facts["owed"] else []
    if facts["confirm"]:
        owed.append("a confirm owed")
    return [
        f"hermes mesh top  {facts['root']}  code {sha}  {time.strftime('%H:%M:%S')}",
        "  ·  ".join([f"{len(ordered)} gateways: {tally}", sign_in, *owed, *facts["errors"]]),
    ]


def _duration(seconds: int) -> str:
    if seconds <= 0:
        return "expired"
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m left" if hours else f"{rest // 60}m{rest % 60:02d}s left"


def _attribute(row: dict[str, Any]) -> int:
    if not curses.has_colors():
        return 0
    if (
        row["state"] in (rows.DOWN, rows.OFFLINE, rows.REFUSED, ops.STARTUP_FAILED)
        or row["health"]["state"] == UNHEALTHY
    ):
        return curses.color_pair(_RED)
    if row["state"] == ops.RUNNING:
        return curses.color_pair(_GREEN)
    return curses.color_pair(_YELLOW)
