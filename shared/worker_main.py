"""The start of an install-wide worker process (``python -m services.<worker>``).

The command line (no options: the install comes from ``HERMES_HOME``), logging, the root
home's endpoint, its lock (a second worker for the install exits 73), the trio run, and,
when the worker stopped for new code, the exec into it. A worker is built by a factory
named ``"module:Class"`` (imported only once the lock is held, so a refused start stays
cheap) and has ``async run() -> int`` and a ``life`` (``shared.lifecycle.Lifecycle``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shared import curve, exit_codes, homes, logs
from shared.errors import HermesError
from shared.locks import FileLock, take_or_report


def worker_main(service: str, factory: str, description: str, what: str) -> int:
    """The whole of ``python -m services.<service>``."""
    argparse.ArgumentParser(prog=f"python -m services.{service}", description=description).parse_args()
    module, _, name = factory.partition(":")

    def build(root: Path, endpoint: homes.Endpoint, lock: FileLock) -> Any:
        return getattr(importlib.import_module(module), name)(root, endpoint, lock)

    return run_install_worker(service, f"services.{service}", build, what)


def run_install_worker(
    service: str, module: str, build: Callable[[Path, homes.Endpoint, FileLock], Any], what: str
) -> int:
    logs.configure(service)
    try:
        root = homes.root_home()
        endpoint = homes.endpoint(root, service)
        curve.server_options(endpoint)  # a TCP endpoint without its keys never starts
    except HermesError as exc:  # a bad run dir, TCP setting or key
        print(f"{service}: {exc.message}", file=sys.stderr)
        return exit_codes.CONFIG
    lock = take_or_report(endpoint.lock_path, f"{service}: this install already has {what}")
    if lock is None:
        return exit_codes.DUPLICATE

    import trio

    worker = build(root, endpoint, lock)
    try:
        code = trio.run(worker.run)
    finally:
        lock.release()
    if worker.life.reexec_requested:
        from shared.reexec import reexec_module

        reexec_module(module)
    return code
