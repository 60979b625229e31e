"""Starting the handoff retry worker: ``python -m services.handoff_retry``, one per install."""

from __future__ import annotations

import argparse

from shared.worker_main import run_install_worker


def _build(root, endpoint, lock):
    from services.handoff_retry.app import HandoffWorker

    return HandoffWorker(root, endpoint, lock)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.handoff_retry", description="Run the install's guest-handoff retry worker."
    )
    parser.parse_args(argv)
    return run_install_worker("handoff_retry", "services.handoff_retry", _build, "a handoff retry worker")
