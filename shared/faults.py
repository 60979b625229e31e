"""Named pause points for crash tests: a process told to pause at a step says so on stderr and
sleeps there, so a test can kill -9 it at exactly that step. A no-op unless
``$HERMES_FAULT_PAUSE_AT`` names the step."""

from __future__ import annotations

import os
import sys
import time

PAUSE_ENV = "HERMES_FAULT_PAUSE_AT"
PAUSE_SECONDS = 60.0  # bounded: a test that forgets to kill the process does not hang it forever


def pause_at(step: str) -> None:
    if os.environ.get(PAUSE_ENV) != step:
        return
    sys.stderr.write(f"paused {step}\n")
    sys.stderr.flush()
    time.sleep(PAUSE_SECONDS)
