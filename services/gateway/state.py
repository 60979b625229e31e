"""``gateway_state.json``: what this gateway is and runs, rewritten atomically on every
runtime-status write.

The code identity (``code_sha``, ``code_version``) is taken once, when the process starts:
it describes the code this interpreter imported, so a later ``git pull`` of the tree does
not change what a running gateway reports. The updater compares it with the new checkout.

It also carries the profile's restart record (``services.gateway.restarts``) from one process
to the next: read from the predecessor's file once, at start, before the first write. A file
that cannot be read as one (torn, or another program's) starts the count afresh, with a warning.

The file carries the Hermes Agent's own fields too (``fleet.state_record``), so its
readers and ours read each other's files: ``kind`` vouches for the record where a reader cannot
read the process's command line. This gateway serves no messaging platform: ``platforms`` is
empty.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleet.state_record import KIND
from services.gateway import restarts
from services.gateway.restarts import Restarts
from services.gateway.transitions import START
from shared.files import StateFileCorrupt, read_json, write_json_atomic
from shared.identity import ProcessIdentity
from shared.layout import GATEWAY_STATE_FILE
from shared.version import __version__, code_sha

# Taken at import, the moment this interpreter loaded the gateway's code.
IMPORTED_CODE_SHA = code_sha()
IMPORTED_CODE_VERSION = __version__

log = logging.getLogger(__name__)


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass
class GatewayState:
    identity: ProcessIdentity
    profile: str
    home: Path
    supervisor: str
    install_id: str | None  # shared.ids: what says "this install" wherever the home is mounted
    instance_id: str  # shared.ids: this start of the process
    # Every profile this process serves, once all their sockets answer (empty: this one alone).
    served_profiles: tuple[str, ...] = ()
    argv: list[str] = field(default_factory=lambda: list(sys.orig_argv))  # as the OS started us
    started_at: str = field(default_factory=utc_now)
    state: str = START
    exit_reason: str | None = None
    restart_requested: bool = False
    active_turns: int = 0
    status_message: str = ""
    restarts: Restarts = Restarts()

    @property
    def path(self) -> Path:
        return self.home / GATEWAY_STATE_FILE

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": KIND,
            "pid": self.identity.pid,
            "start_time": self.identity.start_time,
            "argv": self.argv,
            "hermes_home": str(self.home),
            "profile": self.profile,
            "install_id": self.install_id,
            "instance_id": self.instance_id,
            "served_profiles": list(self.served_profiles or (self.profile,)),
            "gateway_state": self.state,
            "exit_reason": self.exit_reason,
            "restart_requested": self.restart_requested,
            "active_turns": self.active_turns,
            "active_agents": self.active_turns,  # the Hermes Agent's name for it
            "platforms": {},
            "code_sha": IMPORTED_CODE_SHA,
            "code_version": IMPORTED_CODE_VERSION,
            "supervisor": self.supervisor,
            "started_at": self.started_at,
            "updated_at": utc_now(),
            "status_message": self.status_message,
            "restarts": self.restarts.to_dict(),
        }

    def write(self) -> None:
        """Blocking (fsync): call it from a worker thread in async code."""
        write_json_atomic(self.path, self.to_dict())


def restarts_at_start(home: Path, now: float) -> Restarts:
    """This start's restart record: the predecessor's state file in ``home`` carried on (none
    there: the profile's first start)."""
    path = home / GATEWAY_STATE_FILE
    try:
        previous = read_json(path, default=None)
    except StateFileCorrupt as exc:
        log.warning("%s is unreadable (%s); counting restarts afresh", path, exc.reason)
        return restarts.after_start(Restarts(), now)
    except OSError as exc:
        log.warning("cannot read %s (%s); counting restarts afresh", path, exc.strerror or exc)
        return restarts.after_start(Restarts(), now)
    if previous is None:
        return restarts.after_start(None, now)
    record = previous.get("restarts")
    if record is None:  # an older release's file, or the Hermes Agent's: it keeps no record
        return restarts.after_start(Restarts(), now)
    try:
        return restarts.after_start(restarts.from_record(record), now)
    except restarts.Unreadable as exc:
        log.warning("%s holds no restart record of ours (%s); counting restarts afresh", path, exc)
        return restarts.after_start(Restarts(), now)
