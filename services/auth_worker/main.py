"""Starting the auth worker: ``python -m services.auth_worker``, one per install (root home)."""

from __future__ import annotations

import argparse

from shared.worker_main import run_install_worker


def _build(root, endpoint, lock):
    from services.auth_worker.app import AuthWorker

    return AuthWorker(root, endpoint, lock)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.auth_worker", description="Run the install's Nous auth worker (sign-in, keepalive)."
    )
    parser.parse_args(argv)
    return run_install_worker("auth_worker", "services.auth_worker", _build, "an auth worker")
