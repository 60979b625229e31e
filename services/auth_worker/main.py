"""Starting the auth worker: ``python -m services.auth_worker``, one per install (root home).

A second worker for the same install exits 73 and leaves the first alone. A worker that saw
the code on disk change exec's itself into the new code once it has stopped serving.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from shared import homes
from shared.locks import take_or_report

EXIT_DUPLICATE = 73
EXIT_CONFIG = 78


def run_worker() -> int:
    logging.basicConfig(
        level=os.environ.get("HERMES_LOG_LEVEL", "INFO"),
        format="%(asctime)s auth_worker[%(process)d] %(levelname)s %(message)s",
    )
    # One line per HTTP request is noise here; failures are logged by the worker itself.
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)
    from services.auth_worker import ops

    try:
        root = homes.root_home()
        endpoint = homes.endpoint(root, ops.SERVICE)
    except (homes.UnsafeRunDir, homes.EndpointPathTooLong) as exc:
        print(f"auth_worker: {exc.message}", file=sys.stderr)
        return EXIT_CONFIG
    lock = take_or_report(endpoint.lock_path, "auth_worker: this install already has an auth worker")
    if lock is None:
        return EXIT_DUPLICATE

    import trio

    from services.auth_worker.app import AuthWorker

    worker = AuthWorker(root, endpoint, lock)
    try:
        code = trio.run(worker.run)
    finally:
        lock.release()
    if worker.reexec_requested:
        from shared.reexec import reexec_module

        reexec_module("services.auth_worker")
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.auth_worker", description="Run the install's Nous auth worker (sign-in, keepalive)."
    )
    parser.parse_args(argv)
    return run_worker()
