"""Named pause points for crash tests: a real process stops at a step so a test can kill -9 it.

``HERMES_FAULT_PAUSE_AT=<step>`` makes ``pause_at(step)`` write ``paused <step>`` to stderr and
sleep; every other call is a no-op. The sleep is bounded so a forgotten variable cannot hang a
process forever.
"""

from __future__ import annotations

import os
import sys
import time

ENV = "HERMES_FAULT_PAUSE_AT"
PAUSE_SECONDS = 60.0


def pause_at(step: str) -> None:
    if os.environ.get(ENV) != step:
        return
    sys.stderr.write(f"paused {step}\n")
    sys.stderr.flush()
    time.sleep(PAUSE_SECONDS)
