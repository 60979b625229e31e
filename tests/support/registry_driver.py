"""A real process that works on a package registry, for the crash and lock tests.

``install STATE N SEQUENCE`` installs the test package ``N`` (version ``N.0.0``) with catalog
state ``(SEQUENCE, {"key-N"})`` and prints ``installed``; ``HERMES_FAULT_PAUSE_AT`` may stop it
on the way. ``hold STATE`` takes the registry lock, prints ``ready`` and sleeps until killed.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path

from runtime_package.registry import LOCK, Registry
from tests.support.registry_packages import install

HOLD_SECONDS = 60


def main(argv: list[str]) -> int:
    command, state = argv[0], Path(argv[1])
    registry = Registry.at(state, create=True)
    if command == "hold":
        fd = os.open(registry.root / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        print("ready", flush=True)
        time.sleep(HOLD_SECONDS)
        return 0
    n, sequence = int(argv[2]), int(argv[3])
    install(registry, n, version=f"{n}.0.0", catalog_state=(sequence, frozenset({f"key-{n}"})))
    print("installed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
