"""The start of an install-wide worker process (``python -m services.<worker>``).

The command line (no options: the install comes from ``HERMES_HOME``), logging, the root
home's endpoint, its lock (a second worker for the install exits 73), the trio run, and,
when the worker stopped for new code, the exec into it. The exec hands the held lock on
(``--lock-fd``, not for people): a stop that comes meanwhile finds the worker, where a released
lock would let it miss the worker and the new code then run on. A worker is built by a factory
named ``"module:Class"`` (imported only once the lock is held, so a refused start stays
cheap) and has ``async run() -> int`` and a ``life`` (``shared.lifecycle.Lifecycle``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shared import exit_codes, homes, ids, logs, stop_grace
from shared.errors import HermesError
from shared.faults import pause_at
from shared.locks import FileLock, take_or_report
from shared.transport import curve

if TYPE_CHECKING:
    from shared.transport import Service


def worker_main(service: str, factory: str, description: str, what: str) -> int:
    """The whole of ``python -m services.<service>``."""
    parser = argparse.ArgumentParser(prog=f"python -m services.{service}", description=description)
    parser.add_argument("--lock-fd", type=int, help=argparse.SUPPRESS)  # its own re-exec's
    lock_fd = parser.parse_args().lock_fd
    module, _, name = factory.partition(":")

    def build(root: Path, endpoint: homes.Endpoint, lock: FileLock) -> Any:
        return getattr(importlib.import_module(module), name)(root, endpoint, lock)

    return run_install_worker(service, f"services.{service}", build, what, lock_fd=lock_fd)


def run_install_worker(
    service: str,
    module: str,
    build: Callable[[Path, homes.Endpoint, FileLock], Any],
    what: str,
    *,
    lock_fd: int | None = None,
) -> int:
    logs.configure(service)
    try:
        root = homes.root_home()
        endpoint = homes.endpoint(root, service)
        curve.server_options(endpoint)  # a TCP endpoint without its keys never starts
        stop_grace.stop_grace(os.environ)  # read again when it stops: refused now, not then
    except HermesError as exc:  # a bad run dir, TCP setting, key or stop grace
        print(f"{service}: {exc.message}", file=sys.stderr)
        return exit_codes.CONFIG
    if lock_fd is None:
        pause_at(f"worker:start:{service}")
        lock = take_or_report(endpoint.lock_path, f"{service}: this install already has {what}")
        if lock is None:
            return exit_codes.DUPLICATE
    else:
        try:
            lock = FileLock.adopt(endpoint.lock_path, lock_fd)
        except HermesError as exc:
            print(f"{service}: {exc.message}", file=sys.stderr)
            return exit_codes.CONFIG

    import trio

    worker = build(root, endpoint, lock)
    try:
        code = trio.run(worker.run)
    except BaseException:
        lock.release()
        raise
    if not worker.life.reexec_requested:
        lock.release()
        return code
    from shared.reexec import reexec_module

    fd = lock.fileno()
    os.set_inheritable(fd, True)
    pause_at(f"worker:reexec:{service}")
    reexec_module(module, "--lock-fd", str(fd))
    return code  # not reached: the exec does not return


def install_service(
    name: str, root: Path, endpoint: homes.Endpoint, lock: FileLock, info: Callable[[], dict[str, Any]]
) -> Service:
    """An install-wide worker's control service: bound where its endpoint says (CURVE on TCP),
    holding the lock ``run_install_worker`` took, its ``hello`` naming the install and process."""
    from shared.transport import Service  # trio comes with it: only once the lock is held

    said = ids.describe(root)  # built before the event loop runs: a blocking read is fine
    return Service(
        name, endpoint.bind_control, lock=lock, options=curve.server_options(endpoint), info=lambda: {**info(), **said}
    )
