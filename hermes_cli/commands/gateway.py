"""``hermes gateway run``: the active profile's gateway, in the foreground."""

from __future__ import annotations


def cmd_run(args) -> int:
    from services.gateway import run_gateway

    return run_gateway()
