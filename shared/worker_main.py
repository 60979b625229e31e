"""The start of an install-wide worker process (``python -m services.<worker>``).

Logging, the root home's endpoint, its lock (a second worker for the install exits 73), the
trio run, and, when the worker stopped for new code, the exec into it. A worker is anything
with ``async run() -> int`` and a ``life`` (``shared.lifecycle.Lifecycle``).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shared import homes
from shared.locks import FileLock, take_or_report

EXIT_DUPLICATE = 73
EXIT_CONFIG = 78


def run_install_worker(service: str, module: str, build: Callable[[Path, homes.Endpoint, FileLock], Any], what: str) -> int:
    logging.basicConfig(
        level=os.environ.get("HERMES_LOG_LEVEL", "INFO"),
        format=f"%(asctime)s {service}[%(process)d] %(levelname)s %(message)s",
    )
    # One line per HTTP request is noise; workers log failures themselves, never a token.
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        root = homes.root_home()
        endpoint = homes.endpoint(root, service)
    except (homes.UnsafeRunDir, homes.EndpointPathTooLong) as exc:
        print(f"{service}: {exc.message}", file=sys.stderr)
        return EXIT_CONFIG
    lock = take_or_report(endpoint.lock_path, f"{service}: this install already has {what}")
    if lock is None:
        return EXIT_DUPLICATE

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
