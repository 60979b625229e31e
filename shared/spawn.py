"""Starting an install-wide worker on demand, detached from the command that needs it.

A command that needs a long-lived worker (the auth worker) starts it when it is not running:
in its own session, so neither a Ctrl-C here nor the end of this command stops it, logging to
``<root>/logs/<service>.log``. Two commands racing to start it are safe: the loser exits 73
on the endpoint lock and both then talk to the winner. ``hermes mesh down`` stops them again.
A worker is started only where this home owns it: an ipc address, or a local TCP address
whose lock file is in this home's run directory (a worker of this home ran there before). A
TCP worker whose lock is not here (``shared.endpoint_lock``: a container's, another host's) is
asked, and used when it answers; when nothing does it is ``service_not_local`` and nothing is
started: a copy here would hold the port its own container must bind, and this install's
clients, which trust that container's server key, would be refused by it anyway.
"""

from __future__ import annotations

import selectors
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from shared import exit_codes, homes
from shared.endpoint_lock import lock_says
from shared.errors import TransportError
from shared.locks import probe
from shared.process_signals import HeldProcess
from shared.transport import answers, ipc_unreachable
from shared.version import INSTALL_ROOT

START_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0
CANCEL_TIMEOUT = 2.0  # a process still starting has nothing to finish

# The install-wide workers outside supervisord, each before any it starts (the auth worker
# starts the handoff retries), so that a stop of them all finds every one it must stop.
WORKERS = ("auth_worker", "handoff_retry", "hook_reporter")


class ServiceStartFailed(TransportError):
    code = "service_start_failed"


class ServiceNotLocal(TransportError):
    code = "service_not_local"


class ServiceStartCancelled(TransportError):
    code = "service_start_cancelled"


def ensure_service(
    root: Path,
    service: str,
    module: str,
    *,
    timeout: float = START_TIMEOUT,
    claim: bool = False,
    cancel: threading.Event | None = None,
) -> homes.Endpoint:
    """The endpoint of ``service`` in ``root``, started from ``module`` first if nothing holds it.

    Where its lock here cannot tell (a TCP address served from a home out of sight: a
    container, another host), the service is asked: one that answers is used as it is; none
    answering is ``ServiceNotLocal``, and nothing is started. ``claim`` (``hermes mesh up``,
    which runs this install's mesh on this host) starts one on a local TCP address whose lock
    is not here yet; its lock file makes the address this home's from then on.

    ``cancel`` is a worker's own stop, for a worker that starts another: once it is set,
    nothing is started, and a process started but not yet serving is stopped again
    (``ServiceStartCancelled``). Not yet serving, it holds no lock, so a stop of the
    install's workers could not find it once its starter is gone."""
    endpoint = homes.endpoint(root, service)
    running = lock_says(endpoint)
    if running is None:
        if answers(endpoint):
            return endpoint
        if endpoint.tcp is not None and not (claim and endpoint.tcp.is_local):
            raise _not_local(service, endpoint)
    elif running and _serving(endpoint):
        return endpoint
    if cancel is not None and cancel.is_set():
        raise _cancelled(service)
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
        if code is not None and code != exit_codes.DUPLICATE:  # another copy won the race for the endpoint
            raise ServiceStartFailed(
                f"the {service} exited with code {code} while starting; see {log_path}",
                detail={"service": service, "exit_code": code, "log": str(log_path)},
            )
        if cancel is not None and cancel.is_set():
            end_child(process, CANCEL_TIMEOUT)
            raise _cancelled(service)
        if time.monotonic() > deadline:
            raise ServiceStartFailed(
                f"the {service} did not start within {timeout:g}s; see {log_path}",
                detail={"service": service, "log": str(log_path)},
            )
        time.sleep(0.05)
    return endpoint


def _cancelled(service: str) -> ServiceStartCancelled:
    return ServiceStartCancelled(f"the start of the {service} was cancelled", detail={"service": service})


def _not_local(service: str, endpoint: homes.Endpoint) -> ServiceNotLocal:
    return ServiceNotLocal(
        f"the {service} at {endpoint.control} does not answer, and this home does not serve it "
        f"(its lock is not in {endpoint.lock_path.parent}): it runs in a container or on another host",
        detail={
            "service": service,
            "control": endpoint.control,
            "hint": f"start the {service} where it runs (its container: `docker compose up -d`; or its host)",
        },
    )


def _serving(endpoint: homes.Endpoint) -> bool:
    # The lock is taken before the bind, and a dead worker's socket file stays behind: a
    # worker serves once its lock is held and its socket takes a connection.
    return probe(endpoint.lock_path).held and not ipc_unreachable(endpoint.control)


def stop_service(root: Path, service: str, *, timeout: float = STOP_TIMEOUT) -> int | None:
    """Stop the running ``service`` of ``root`` (SIGTERM, then SIGKILL after ``timeout``); the
    pid it had, or ``None`` when none ran. The lock's recorded holder is signalled only while
    it is that very process (pid and start time), never a pid that was reused since."""
    lock = probe(homes.endpoint(root, service, create=False).lock_path)
    holder = lock.holder
    process = HeldProcess.hold(holder) if lock.held and holder is not None else None
    if process is None:
        return None
    with process:
        for signum in (signal.SIGTERM, signal.SIGKILL):
            if not process.signal(signum) or process.wait_gone(timeout):
                break
        return process.ident.pid


def stop_workers(root: Path) -> dict[str, int]:
    """Stop every install-wide worker of ``root``, in ``WORKERS`` order; the pid of each that ran."""
    return {name: pid for name in WORKERS if (pid := stop_service(root, name)) is not None}


def first_line(process: subprocess.Popen, timeout: float) -> str:
    """The first line ``process`` printed on its stdout pipe, stripped; "" when none came
    within ``timeout`` (a child that prints its address or "ready" before it serves)."""
    stdout = process.stdout
    if stdout is None:
        raise ValueError("first_line needs a process started with stdout=PIPE")
    with selectors.DefaultSelector() as sel:
        sel.register(stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            return ""
    line = stdout.readline()
    return (line.decode(errors="replace") if isinstance(line, bytes) else line).strip()


def end_child(process: subprocess.Popen, timeout: float = STOP_TIMEOUT) -> int:
    """Stop a child of this process: SIGTERM, a bounded wait, then SIGKILL; its exit code."""
    if process.poll() is None:
        process.terminate()
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait(timeout=timeout)
