"""The gateway host as the owner of a gateway (``HOST_KIND``): a kind without units, as
``hermes gateway start|stop|restart`` use it.

A profile's gateway is the host's when the embedded mesh's host program runs it: that
program's command line names the profile in its set (read back from the mesh config, as
``hermes mesh status`` shows it) and it runs on this install's root home. It is driven over
the host's control socket (``fleet.supervisors.host``: ``start``, ``stop``, ``restart``), as
supervisord drives a program; a host that does not answer is ``supervisor_unavailable``
naming its socket."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from fleet.supervisors import HOST_KIND, Unit
from fleet.supervisors import supervisord as sv
from fleet.supervisors.errors import SupervisorFailed, SupervisorUnavailable
from fleet.supervisors.host import RESTART, SERVICE, START, STATUS, STOP
from shared import homes
from shared.protocol import UNANSWERED, OpSpec, RemoteError
from shared.transport import NO_RETRY, connect

# How long a gateway the host forked has to answer ``ping`` on its control socket.
ANSWER_SECONDS = 30.0
POLL = 0.1


def find(profile: str, home: Path) -> Unit | None:
    """The host's gateway of ``profile`` if this install's mesh config has the host program
    running ``profile`` on the root home that ``home`` is ``profile``'s home in."""
    root = sv.root_of(profile, home)
    if root is None:
        return None
    paths = sv.mesh_paths(root)
    if not paths.config.exists():
        return None
    program = sv.configured_programs(paths).get(sv.HOST_PROGRAM)
    if program is None or not program.host or profile not in program.served or program.home is None:
        return None
    if os.path.normpath(program.home) != os.path.normpath(root.absolute()):
        return None
    return Unit(
        kind=HOST_KIND,
        name=f"{sv.HOST_PROGRAM}:{profile}",  # supervisord's way to name one process of a group
        profile=profile,
        home=homes.profile_home(profile, root),
        path=paths.config,
    )


def start(unit: Unit) -> None:
    """Have the host fork the gateway unless it runs, and wait (bounded) until it answers."""
    _answering(unit, _call(unit, START))


def stop(unit: Unit) -> None:
    """Have the host stop the gateway (its own short drain) and leave it down until started."""
    _call(unit, STOP)


def restart(unit: Unit) -> None:
    """Have the host roll the gateway (drained, forked anew from a fork server of the code on
    disk), or start it when it is down, and wait (bounded) until the new one answers."""
    _answering(unit, _call(unit, RESTART))


def _call(unit: Unit, spec: OpSpec) -> dict[str, Any]:
    root = sv.root_of(unit.profile, unit.home)
    if root is None or unit.kind != HOST_KIND:
        raise ValueError(f"{unit} is not a gateway of the gateway host")
    endpoint = homes.endpoint(root, SERVICE, create=False)
    try:
        with connect(endpoint, retry=NO_RETRY) as client:
            client.call(STATUS)  # a host that does not answer says so in seconds, not a roll's time
            return client.call(spec, {"profile": unit.profile})
    except RemoteError as exc:
        if exc.code not in UNANSWERED:
            raise
        raise SupervisorUnavailable(
            f"the gateway host does not answer on {endpoint.control} ({exc.code}); "
            "is the mesh up? `hermes mesh status` shows its program",
            detail={"socket": endpoint.control, "code": exc.code, "profile": unit.profile},
        ) from None


def _answering(unit: Unit, answer: dict[str, Any]) -> None:
    """Wait (bounded) until the gateway the host answered with answers ``ping``."""
    if answer.get("pid") is None:
        raise SupervisorFailed(
            f"the gateway host did not start the gateway of {unit.profile}: {answer.get('reason') or 'no reason'}",
            detail={"profile": unit.profile, "state": answer.get("state")},
        )
    deadline = time.monotonic() + ANSWER_SECONDS
    while not sv.answers_ping(unit.home):
        if time.monotonic() >= deadline:
            raise SupervisorFailed(
                f"the gateway of {unit.profile} (pid {answer['pid']}) did not answer ping within {ANSWER_SECONDS:g}s",
                detail={"profile": unit.profile, "pid": answer["pid"]},
            )
        time.sleep(POLL)
