"""``hermes gateway install|start|stop|restart`` for the active profile's gateway.

``install`` writes the unit of the kind asked for. The others act through the kind that
owns the gateway, which each kind's ``find`` decides by the ``HERMES_HOME`` in its unit: a
unit of the same name that runs another install's home is not ours to touch. A gateway of
the mesh's gateway host has no unit: its owner is the host (``HOST_KIND``), whose program's
set names the profile, and the host drives it alone.

A start or restart of a gateway an update owes a restart asks the fresh process which code
it runs; once that is the commit expected of it, the gateway's part of the fleet-restart
obligation is cleared (``services.updater.obligations``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fleet.supervisors import HOST_KIND, Unit, kind_module
from fleet.supervisors.errors import SupervisorError, UnitValueInvalid
from hermes_cli import output
from shared import homes, ids

# The order owners are looked for: the embedded mesh first (its programs, then its gateway
# host's set), then the system supervisors.
OWNER_ORDER: tuple[str, ...] = ("supervisord", HOST_KIND, "systemd", "launchd")
_DONE = {"start": "started", "stop": "stopped", "restart": "restarted"}
# How long a started gateway has to answer with the code it runs.
ANSWER_SECONDS = 15.0


class NotSupervised(SupervisorError):
    code = "not_supervised"


def find_owner(profile: str, home: Path, *, kinds: Sequence[str] = OWNER_ORDER) -> Unit | None:
    for kind in kinds:
        unit = kind_module(kind).find(profile, home)
        if unit is not None:
            return unit
    return None


def _active() -> tuple[str, Path]:
    profile = homes.active_profile()
    return profile, homes.profile_home(profile, homes.root_home(), must_exist=True)


# --- install ----------------------------------------------------------------------------------


def install_report(unit: Unit) -> dict[str, Any]:
    # Only kinds with a reload step (systemd) say whether the supervisor has read the unit.
    return {
        "supervisor": unit.kind,
        "unit": unit.name,
        "path": None if unit.path is None else str(unit.path),
        "profile": unit.profile,
        "home": str(unit.home),
        "scope": unit.scope,
        "reloaded": getattr(unit, "reloaded", None),
        "note": getattr(unit, "note", None),
    }


def _install_text(d: dict[str, Any]) -> str:
    lines = [
        f"wrote {d['supervisor']} unit {d['unit']} ({d['scope']} scope)",
        f"  path     {d['path'] or '-'}",
        f"  profile  {d['profile']}",
        f"  home     {d['home']}",
    ]
    if d["reloaded"] is True:
        lines.append("  loaded   yes; start it with `hermes gateway start`")
    elif d["reloaded"] is False:
        lines.append(f"  loaded   no: {d['note'] or 'unknown reason'}")
    return "\n".join(lines)


def cmd_install(args) -> int:
    profile, home = _active()
    kind = kind_module(args.supervisor)
    options = {}
    if args.watchdog is not None:  # a systemd unit's own setting: its module reads the value
        if not hasattr(kind, "watchdog_seconds"):
            raise UnitValueInvalid(
                f"--watchdog applies to systemd units only, not to {args.supervisor}",
                detail={"field": "watchdog", "value": args.watchdog},
            )
        options["watchdog"] = kind.watchdog_seconds(args.watchdog)
    # Made now if missing: a hardened unit's gateway may write its own home alone. Where it
    # cannot be (no root home yet), the gateway still serves, reporting no install id.
    with contextlib.suppress(OSError, ids.InstallIdCorrupt):
        ids.ensure_install_id(homes.root_home())
    unit = kind.install(profile, home, scope=args.scope, **options)
    output.emit(args, install_report(unit), _install_text)
    return 0


# --- start, stop, restart ---------------------------------------------------------------------


def act(action: str, profile: str, home: Path, *, kinds: Sequence[str] = OWNER_ORDER) -> Unit:
    """Carry out ``action`` through the supervisor that owns ``profile``'s gateway at ``home``."""
    if action not in _DONE:
        raise ValueError(f"unknown action {action!r}")
    unit = find_owner(profile, home, kinds=kinds)
    if unit is None:
        raise NotSupervised(
            f"no supervisor runs the gateway of profile {profile} ({home}): "
            "install one with `hermes gateway install --supervisor KIND`, or run the mesh with `hermes mesh up`",
            detail={"profile": profile, "home": str(home), "looked_in": list(kinds)},
        )
    getattr(kind_module(unit.kind), action)(unit)
    return unit


def _run(args, action: str) -> int:
    profile, home = _active()
    unit = act(action, profile, home)
    data = {
        "action": action,
        "supervisor": unit.kind,
        "unit": unit.name,
        "profile": unit.profile,
        "home": str(unit.home),
        "scope": unit.scope,
        "owed_restart": None if action == "stop" else _clear_owed_restart_if_on_expected_code(profile, home),
    }
    output.emit(args, data, _run_text)
    return 0


def _run_text(d: dict[str, Any]) -> str:
    text = f"{_DONE[d['action']]} {d['unit']} through {d['supervisor']} ({d['scope']} scope)"
    owed = d["owed_restart"]
    if owed is None:
        return text
    running, expected = str(owed["running"])[:12], str(owed["expected"])[:12]
    if owed["cleared"]:
        return f"{text}\n  it runs {running}, the code an update owed it: no longer owed a restart"
    if owed["running"] is None:
        return (
            f"{text}\n⚠ it did not answer as running within {ANSWER_SECONDS:g}s: still owed a restart onto {expected}"
        )
    return f"{text}\n⚠ it runs {running}, not {expected}: still owed a restart onto it"


def _clear_owed_restart_if_on_expected_code(profile: str, home: Path) -> dict[str, Any] | None:
    """When an update owes ``profile``'s gateway a restart: clear that once the gateway runs the
    commit expected of it. None when nothing is owed."""
    from services.updater import clear_gateway, read_fleet

    root = homes.root_home()
    part = read_fleet(root).get(profile)
    if part is None:
        return None
    running = _running_code(home)
    cleared = clear_gateway(root, profile, running)
    return {"cleared": cleared, "expected": part["expected"], "running": running}


def _running_code(home: Path) -> str | None:
    """The code the gateway at ``home`` runs, once it answers as running (bounded), else None."""
    from hermes_cli.service_client import connect
    from shared.gateways import ops
    from shared.protocol import RemoteError
    from shared.transport import NO_RETRY

    endpoint = homes.endpoint(home, ops.SERVICE, create=False)
    deadline = time.monotonic() + ANSWER_SECONDS
    while time.monotonic() < deadline:
        try:
            with connect(endpoint, retry=NO_RETRY) as client:
                status = client.call(ops.STATUS, timeout=2.0)
        except RemoteError:
            status = {}
        if status.get("state") == ops.RUNNING:
            return status.get("code_sha")
        time.sleep(0.2)
    return None


def cmd_start(args) -> int:
    return _run(args, "start")


def cmd_stop(args) -> int:
    return _run(args, "stop")


def cmd_restart(args) -> int:
    return _run(args, "restart")
