"""Whether each profile's gateway runs, as ``hermes gateway status`` finds it (``fleet.discovery``).

An endpoint lock tells only where the gateway's home is: a gateway in a container whose home is
a volume, or on another host, has no lock here and is known only by its socket, and the Hermes
Agent's own gateway holds no lock of ours and is known by its state file. So ``doctor`` and
``profile list|show`` take a gateway's state from the survey: a gateway it lists runs, in the
state it gives; one asked over TCP that gave no answer is ``offline``, one that refused the
handshake ``refused``. A profile it found nothing for keeps what the lock says (``stopped``, or
a process that holds the lock and is no gateway the survey knows: ``unknown``).

The survey (pyzmq or the ZMTP client, msgpack) is imported and run only when it could find
something: a gateway's lock is held or cannot tell here, or a state file names a live process.
A home whose gateways are all stopped answers from its locks and files, as cheaply as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from shared import homes
from shared.endpoint_lock import lock_says
from shared.errors import HermesError
from shared.files import StateFileCorrupt, read_json
from shared.identity import ProcessIdentity, is_alive
from shared.layout import GATEWAY_STATE_FILE
from shared.locks import LockStatus

STOPPED = "stopped"
UNKNOWN = "unknown"


class GatewayLiveness(NamedTuple):
    state: str  # a gateway state (running, draining, ...), offline, refused, stopped or unknown
    live: bool  # a process serves it, as far as this host can tell
    pid: int | None  # as the gateway reports it (its own pid namespace's in a container)
    source: str  # socket, state_file, scan (the survey), or lock
    error: dict[str, Any] | None  # an offline or refused gateway's typed error


def from_lock(lock: LockStatus) -> GatewayLiveness:
    """What the endpoint lock alone says."""
    if lock.held:
        return GatewayLiveness(UNKNOWN, True, lock.holder.pid if lock.holder else None, "lock", None)
    return GatewayLiveness(STOPPED, False, None, "lock", None)


def gateway_liveness(root: Path, locks: Mapping[str, LockStatus]) -> dict[str, GatewayLiveness]:
    """profile -> its gateway's liveness, for each profile of ``locks`` (its gateway's lock here)."""
    told = {name: from_lock(lock) for name, lock in locks.items()}
    asked = [name for name in locks if _survey_may_find(root, name)]
    if not asked:
        return told
    from fleet import discovery  # only now: it loads the clients and msgpack

    try:
        found = discovery.survey(root)
    except HermesError as exc:  # no client can be made (a libzmq CURVE refuses, a key missing)
        error = {"code": exc.code, "message": exc.message}
        return {**told, **{name: told[name]._replace(state=UNKNOWN, error=error) for name in asked}}
    errors = {u.profile: {"code": u.error.code, "message": u.error.message} for u in found.unreached}
    for unreached in found.unreached:
        if unreached.profile in told:
            told[unreached.profile] = GatewayLiveness(unreached.state, False, None, "socket", errors[unreached.profile])
    for record in reversed(found.records):  # the best-informed record of a profile comes first
        if record.profile in told:
            # A gateway listed by its state file whose socket refused this client runs all the same.
            told[record.profile] = GatewayLiveness(
                record.state, True, record.pid, record.source, errors.get(record.profile)
            )
    return told


def _survey_may_find(root: Path, profile: str) -> bool:
    home = homes.profile_home(profile, root)
    if _names_live_process(home / GATEWAY_STATE_FILE):
        return True
    try:
        endpoint = homes.endpoint(home, "gateway", create=False)
    except (homes.EndpointPathTooLong, homes.UnsafeRunDir):
        return False  # no socket the survey would ask
    return lock_says(endpoint) is not False


def _names_live_process(path: Path) -> bool:
    """Whether a state file is there and names a process that lives (the survey then judges
    whether it is that gateway): the file a stopped gateway leaves names a process gone."""
    try:
        state = read_json(path, default=None)
        return state is not None and is_alive(ProcessIdentity.from_dict(state))
    except (StateFileCorrupt, OSError, ValueError):
        return True  # the survey says what it makes of it
