"""``hermes mesh top`` and ``hermes gateway status --watch``: the live fleet view
(``hermes_cli.fleet_view``), on the terminal or as JSON lines."""

from __future__ import annotations

import sys

from fleet.health import MIN_HEALTHY_SECONDS
from hermes_cli import output
from hermes_cli.errors import NotATerminal
from hermes_cli.fleet_view import view
from shared import homes


def cmd_top(args) -> int:
    as_json = output.wants_json(args)
    args.json_lines = True
    if not as_json and not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise NotATerminal(
            "the fleet view draws on a terminal, and this is none",
            detail={"hint": "`--json` prints one JSON line per change instead"},
        )
    min_healthy = args.min_healthy if args.min_healthy is not None else MIN_HEALTHY_SECONDS
    try:
        with view.running(homes.root_home(), min_healthy) as fleet:
            if as_json:
                view.json_lines(fleet)
            else:
                from hermes_cli.fleet_view import screen

                screen.show(fleet)
    except KeyboardInterrupt:  # Ctrl-C or a stop: how a view ends
        pass
    return 0
