"""``gateway_state.json`` as the real Hermes Agent writes it: its own writer, run by its own
interpreter, in a process that stays alive while a test reads the record."""

from __future__ import annotations

import contextlib
import json
import select
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.real_hermes import isolated_env

# A record the real writer wrote this way (hermes-agent 0.19.0), kept unedited for the unit tier.
REAL_RECORD = Path(__file__).parent / "fixtures" / "real_hermes_gateway_state.json"
START_TIMEOUT = 60.0

# The real writer, as its gateway calls it: running with two turns, one platform connected and
# one failed. The process then waits, alive, until its stdin closes.
REAL_WRITER = """
import sys
from gateway.status import write_runtime_status
write_runtime_status(gateway_state="running", active_agents=2, platform="telegram", platform_state="connected")
write_runtime_status(platform="discord", platform_state="fatal", error_code="auth", error_message="bad token")
print("ready", flush=True)
sys.stdin.read()
"""


@contextlib.contextmanager
def real_gateway_record(real, home: Path, hermes_home: Path) -> Iterator[tuple[subprocess.Popen[str], dict[str, Any]]]:
    """A live process that wrote ``<hermes_home>/gateway_state.json`` with the real writer, and
    that record. The program is a ``gateway/run.py``, so its command line is a gateway's, as a
    real gateway's is."""
    script = home / "gateway" / "run.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(REAL_WRITER)
    proc = subprocess.Popen(
        [str(real.python), "-I", str(script)],  # -I: the real package's own modules, never this checkout's
        env=isolated_env(home, hermes_home),
        cwd=home,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready = select.select([proc.stdout], [], [], START_TIMEOUT)[0]
        assert ready and proc.stdout.readline() == "ready\n", "the real writer did not start"
        yield proc, json.loads((hermes_home / "gateway_state.json").read_text())
    finally:
        proc.communicate(timeout=30)  # closes its stdin: it ends
