"""Starting an install-wide worker on demand, detached from the command that needs it.

A command that needs a long-lived worker (the auth worker) starts it when it is not running:
in its own session, so neither a Ctrl-C here nor the end of this command stops it, logging to
``<root>/logs/<service>.log``. Two commands racing to start it are safe: the loser exits 73
on the endpoint lock and both then talk to the winner.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from shared import homes
from shared.call_rules import ipc_unreachable
from shared.errors import HermesError
from shared.locks import probe
from shared.version import INSTALL_ROOT

START_TIMEOUT = 15.0
EXIT_DUPLICATE = 73  # another copy won the race for the endpoint


class ServiceStartFailed(HermesError):
    code = "service_start_failed"


def ensure_service(root: Path, service: str, module: str, *, timeout: float = START_TIMEOUT) -> homes.Endpoint:
    """The endpoint of ``service`` in ``root``, started from ``module`` first if nothing holds it."""
    endpoint = homes.endpoint(root, service)
    if _serving(endpoint):
        return endpoint
    log_path = Path(root) / "logs" / f"{service}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", module],
            cwd=INSTALL_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while not _serving(endpoint):
        code = process.poll()
        if code is not None and code != EXIT_DUPLICATE:
            raise ServiceStartFailed(
                f"the {service} exited with code {code} while starting; see {log_path}",
                detail={"service": service, "exit_code": code, "log": str(log_path)},
            )
        if time.monotonic() > deadline:
            raise ServiceStartFailed(
                f"the {service} did not start within {timeout:g}s; see {log_path}",
                detail={"service": service, "log": str(log_path)},
            )
        time.sleep(0.05)
    return endpoint


def _serving(endpoint: homes.Endpoint) -> bool:
    # The lock is taken before the bind, and a dead worker's socket file stays behind: a
    # worker serves once its lock is held and its socket takes a connection.
    return probe(endpoint.lock_path).held and not ipc_unreachable(endpoint.control)
