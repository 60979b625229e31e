"""``hermes gateway run [--serve A,B,...] [--create-profile]``: the active profile's gateway,
or with ``--serve`` one process serving every profile named (a multiplex gateway), in the
foreground (with ``--create-profile``, in homes made first where a named profile has none)."""

from __future__ import annotations


def cmd_run(args) -> int:
    from services.gateway import run_gateway

    return run_gateway(create=getattr(args, "create_profile", False), serve=getattr(args, "serve", None))
