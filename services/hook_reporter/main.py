"""Starting the hook reporter: ``python -m services.hook_reporter``, one per install.

The operator daemon's report endpoint comes from ``POHUNEK_DAEMON_ENDPOINT``.
"""

from __future__ import annotations

import argparse

from shared.worker_main import run_install_worker


def _build(root, endpoint, lock):
    from services.hook_reporter.app import HookReporter

    return HookReporter(root, endpoint, lock)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.hook_reporter", description="Run the install's operator hook reporter."
    )
    parser.parse_args(argv)
    return run_install_worker("hook_reporter", "services.hook_reporter", _build, "a hook reporter")
