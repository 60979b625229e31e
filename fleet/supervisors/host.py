"""The gateway host's contract: how a gateway knows it runs under one, what its command line
is, its control protocol (light: no trio, no zmq) and its errors.

The gateway host (``python -m services.gateway_host --profiles a,b``) runs every listed
profile's gateway of an install as a child of one fork server: a fresh interpreter that
imported the gateway's code once and forks a gateway per profile. A ``roll`` starts a new
fork server of the code on disk and moves every gateway onto it. Each gateway finds
``HOST_KIND`` (``fleet.supervisors``) in its environment: it knows who restarts it.

- ``status`` -> ``{"pid", "profiles": {profile: {"pid", "state", "fork_server"}},
  "fork_server": {"pid", "code_sha"}, "fork_servers": [...]}``.
- ``prepare`` -> ``{"fork_server": {"pid", "code_sha"} | None}`` at once: a fork server of the
  code on disk starts importing now, when the current one runs other code (an update asks this
  at its commit point, so that its roll finds one imported); it becomes the one the host forks
  from once it has imported.
- ``roll`` (``profiles``: which gateways, default all; ``deadline``: each one's drain) ->
  ``{"fork_server": {"pid", "code_sha"}, "profiles": {profile: {"old_pid", "new_pid",
  "finished", "cut", "accepted", "error"?}}}``; a fork server that cannot start or import fails it with
  ``roll_failed``, and then no gateway was drained.

One profile's gateway is driven alone, as supervisord drives a program; each op takes
``profile`` (one the host runs, else ``profile_not_hosted`` naming the field) and answers
``{"profile", "pid", "state", "reason"}``:

- ``stop`` sends the gateway SIGTERM (its own short drain), waits (bounded) for its exit and
  leaves it down (``"stopped"``) whatever its exit code: nothing starts it again until a
  ``start`` or ``restart``. Already down, it answers at once.
- ``start`` forks a down gateway (from a fork server of the code on disk) and answers once it
  is forked, its crash history forgotten; a running one answers with its pid.
- ``restart`` is a roll of that one profile; a down one is started.

Ops on one profile run one at a time, and a restart waits for a roll that runs.
"""

from __future__ import annotations

import sys

from fleet.supervisors.errors import SupervisorError
from shared.gateways.ops import MAX_DRAIN_SECONDS
from shared.homes import MAX_SERVED
from shared.protocol import Field, OpSpec, Remote

SERVICE = "gateway_host"
MODULE = "services.gateway_host"
PROFILES_FLAG = "--profiles"
# How long a new fork server has to import the gateway's code and say so.
READY_SECONDS = 60.0
# How long a roll waits, once drained, for each gateway of the new fork server to be forked.
FORKED_SECONDS = 60.0

STATUS = OpSpec("status", idempotent=True, timeout=5.0, remote=Remote.ALLOWED)
PREPARE = OpSpec("prepare", idempotent=True, timeout=2.0, remote=Remote.WITH_GRANT)
ROLL = OpSpec(
    "roll",
    {
        "profiles": Field(list, required=False, max_len=MAX_SERVED),
        "deadline": Field(float, required=False, min=0.0, max=MAX_DRAIN_SECONDS),
    },
    timeout=READY_SECONDS + MAX_DRAIN_SECONDS + FORKED_SECONDS + 10,
    remote=Remote.WITH_GRANT,
)
# One profile's ops, each bounded by a roll's time: one may wait for a roll, or for the op before it.
_ONE_PROFILE = {"profile": Field(str, max_len=64)}  # a profile name's longest
START = OpSpec("start", _ONE_PROFILE, idempotent=True, timeout=ROLL.timeout, remote=Remote.WITH_GRANT)
STOP = OpSpec("stop", _ONE_PROFILE, idempotent=True, timeout=ROLL.timeout, remote=Remote.WITH_GRANT)
RESTART = OpSpec("restart", _ONE_PROFILE, timeout=ROLL.timeout, remote=Remote.WITH_GRANT)


class HostUnsupported(SupervisorError):
    """The host needs Linux: its gateways die with their fork server (``PR_SET_PDEATHSIG``)."""

    code = "host_unsupported"


class HangCheckInvalid(SupervisorError):
    """A setting of the host's hang check (``gateway_host:`` in ``config.yaml``) out of its range."""

    code = "hang_check_invalid"


class RollFailed(SupervisorError):
    """A roll's new fork server did not start or import: the old gateways serve on, undrained."""

    code = "roll_failed"


class ProfileNotHosted(SupervisorError):
    """An op named a profile whose gateway this host does not run."""

    code = "profile_not_hosted"


def host_supported() -> bool:
    """Whether the host can run here: only Linux kills a gateway with its fork server. Where it
    can, it is the embedded mesh's form unless ``--programs`` is asked for."""
    return sys.platform.startswith("linux")


def require_host() -> None:
    """HostUnsupported off Linux."""
    if not host_supported():
        raise HostUnsupported(
            "the gateway host runs on Linux only (PR_SET_PDEATHSIG)", detail={"platform": sys.platform}
        )


def host_command(profiles: tuple[str, ...], python: str | None = None) -> list[str]:
    return [python or sys.executable, "-m", MODULE, PROFILES_FLAG, ",".join(profiles)]
