"""``gateway_state.json``: what this gateway is and runs, rewritten atomically on every
runtime-status write.

The code identity (``code_sha``, ``code_version``) is taken once, when the process starts:
it describes the code this interpreter imported, so a later ``git pull`` of the tree does
not change what a running gateway reports. The updater compares it with the new checkout.

The file carries the Hermes Agent's own fields too (``fleet.state_record``), so its
readers and ours read each other's files: ``kind`` vouches for the record where a reader cannot
read the process's command line. This gateway serves no messaging platform: ``platforms`` is
empty.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleet.state_record import KIND
from services.gateway.transitions import START
from shared.files import write_json_atomic
from shared.identity import ProcessIdentity
from shared.layout import GATEWAY_STATE_FILE
from shared.version import __version__, code_sha

# Taken at import, the moment this interpreter loaded the gateway's code.
IMPORTED_CODE_SHA = code_sha()
IMPORTED_CODE_VERSION = __version__


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
        }

    def write(self) -> None:
        """Blocking (fsync): call it from a worker thread in async code."""
        write_json_atomic(self.path, self.to_dict())
