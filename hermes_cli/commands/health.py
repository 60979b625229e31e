"""``hermes gateway health`` and ``hermes mesh health SERVICE``: one service's health check, for a
supervisor that runs it every few seconds (a compose ``healthcheck:``, a timer beside a
supervisord program). Exit 0 when it passes, ``exit_codes.UNHEALTHY`` when it does not.

A gateway is asked for a probe turn (``fleet.health_probe.serving_now``: the health rule with no
window); it passes healthy, or ``unknown`` (it answered, but takes no turn now: draining,
starting). An install-wide worker or the gateway host, which take no turns, is asked for a
hello: a blocked loop answers neither.

``--kill-after N`` makes the check a hang detector where the engine does not act on an unhealthy
check itself (Docker never restarts an unhealthy container, nor podman without systemd to time
its checks): the failed checks in a row are counted beside the service's endpoint lock, for the
process that holds the lock, and once ``fleet.hang``'s rule says so that process gets SIGKILL
through a pidfd opened before its identity was checked; the engine's restart policy starts it
again. SIGKILL, because a blocked loop handles no SIGTERM.
"""

from __future__ import annotations

import signal
from typing import Any

from fleet import hang
from fleet.health import HEALTHY, UNHEALTHY, Health
from fleet.health_probe import serving_now
from hermes_cli import output
from hermes_cli.service_client import answers
from shared import exit_codes, homes
from shared.files import update_json
from shared.gateways import ops
from shared.identity import ProcessIdentity, seconds_running
from shared.locks import probe
from shared.process_signals import HeldProcess

WATCH_SUFFIX = ".health"  # beside the lock: <run>/<service>.lock.health


def cmd_gateway(args) -> int:
    profile, home = homes.active_profile(), homes.active_home()
    health = serving_now({profile: home}, timeout=args.timeout)[profile]
    return _report(args, {"profile": profile}, health, homes.endpoint(home, ops.SERVICE, create=False))


def cmd_mesh(args) -> int:
    endpoint = homes.endpoint(homes.root_home(), args.service, create=False)
    if answers(endpoint, args.timeout):
        health = Health(HEALTHY)
    else:
        health = Health(UNHEALTHY, f"it did not answer a hello within {args.timeout:g} s")
    return _report(args, {"service": args.service}, health, endpoint)


def _report(args, data: dict[str, Any], health: Health, endpoint: homes.Endpoint) -> int:
    data["health"] = health.to_dict()
    if args.kill_after:
        data |= _watched(endpoint, health, hang.Policy(failures=args.kill_after))

    def text(d: dict[str, Any]) -> str:
        named = d.get("profile") or d["service"]
        line = f"{named}: {d['health']['state']}" + (f": {d['health']['why']}" if d["health"]["why"] else "")
        if d.get("killed"):
            line += f"; killed (pid {d['killed']}) after {args.kill_after} failed checks in a row"
        elif d.get("failures"):
            line += f"; {d['failures']} failed check(s) in a row of {args.kill_after}"
        return line

    output.emit(args, data, text)
    return exit_codes.UNHEALTHY if health.state == UNHEALTHY else exit_codes.OK


def _watched(endpoint: homes.Endpoint, health: Health, policy: hang.Policy) -> dict[str, Any]:
    """The check counted for the process holding ``endpoint``'s lock, and that process killed
    when the rule says so. Nothing holds it: nothing runs there to count against or kill."""
    lock = probe(endpoint.lock_path)
    holder = lock.holder if lock.held else None
    if holder is None:
        return {"failures": 0, "killed": None}
    age = seconds_running(holder)
    kill = False

    def count(old: dict[str, Any]) -> dict[str, Any]:
        nonlocal kill
        same = old.get("process") == holder.to_dict()
        watch, kill = hang.after_check(
            hang.Watch.from_dict(old.get("watch")) if same else hang.Watch(), health.state, age or 0.0, policy
        )
        return {"process": holder.to_dict(), "watch": watch.to_dict()}

    counted = update_json(endpoint.lock_path.with_name(endpoint.lock_path.name + WATCH_SUFFIX), count, default={})
    return {"failures": counted["watch"]["failures"], "killed": _kill(holder) if kill else None}


def _kill(holder: ProcessIdentity) -> int | None:
    held = HeldProcess.hold(holder)
    if held is None:
        return None  # it ended meanwhile: its supervisor has it already
    with held:
        return holder.pid if held.signal(signal.SIGKILL) else None
