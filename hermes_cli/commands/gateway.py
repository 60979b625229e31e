"""``hermes gateway run [--create-profile]``: the active profile's gateway, in the foreground
(with ``--create-profile``, in a home made first if the named profile has none)."""

from __future__ import annotations


def cmd_run(args) -> int:
    from services.gateway import run_gateway

    return run_gateway(create=getattr(args, "create_profile", False))
