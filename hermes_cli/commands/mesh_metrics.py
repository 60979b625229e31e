"""``hermes mesh metrics [--listen ADDRESS]``: the install's metrics as an OpenMetrics
exposition (``--json``: the same values for scripts), or served for a Prometheus to scrape."""

from __future__ import annotations

import json
from typing import Any

from hermes_cli import output
from hermes_cli.metrics.exposition import render
from hermes_cli.metrics.families import families
from hermes_cli.metrics.gather import gather
from shared import homes


def exposition() -> str:
    return render(families(gather(homes.root_home())))


def cmd_metrics(args: Any) -> int:
    if args.listen is not None:
        from hermes_cli.metrics import address, listener

        where = address.parse(args.listen)  # refused before anything is gathered
        return listener.serve(where, exposition)
    snapshot = gather(homes.root_home())
    output.emit(args, json.loads(json.dumps(snapshot)), lambda d: render(families(d)))
    return 0
