"""The demo's sign-in: a portal simulator, and ``hermes auth login nous`` against it.

The demo plays the person at the browser: when the login shows its code, the demo approves
it through the simulator's control API, as clicking "approve" on the portal would.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from hermes_cli.commands import demo_child
from hermes_cli.errors import DemoFailed
from services.auth_worker import TERMINAL_STATES
from shared.spawn import end_child

DEMO_EMAIL = "operator@demo.invalid"
DEMO_TIER = "plus"
STEP_TIMEOUT = 60.0


class PortalSimulator:
    """``python -m simulators.portal_sim`` of the demo install, on a free local port."""

    def __init__(self, install: Path, env: dict[str, str], state: Path):
        argv = [sys.executable, "-m", "simulators.portal_sim", "--port", "0", "--state", str(state)]
        self.proc, self.url = demo_child.start(argv, install, env)
        if not self.url.startswith("http"):
            self.stop()
            raise DemoFailed("the portal simulator did not start")
        self.control("/_sim/config", {"interval": 1})

    def control(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        answer = httpx.post(self.url + path, json=body, timeout=10)
        if answer.status_code != 200:
            raise DemoFailed(f"the portal simulator refused {path}: HTTP {answer.status_code}")
        return answer.json()

    def stop(self) -> None:
        end_child(self.proc)


def sign_in(install: Path, env: dict[str, str], portal: PortalSimulator, say: Callable[[str], None]) -> dict[str, Any]:
    """Run ``hermes auth login nous --json`` against ``portal``, approving its code; the terminal state."""
    argv = [sys.executable, "-m", "hermes_cli.main", "auth", "login", "nous", "--json", "--no-browser"]
    login = subprocess.Popen(
        argv,
        cwd=install,
        env={**env, "HERMES_PORTAL_URL": portal.url},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_read_lines, args=(login, lines), daemon=True).start()
    try:
        while True:
            try:
                line = lines.get(timeout=STEP_TIMEOUT)
            except queue.Empty:
                raise DemoFailed("hermes auth login showed nothing for a minute") from None
            if line is None:
                raise DemoFailed(f"hermes auth login ended without a result (exit {login.wait(10)})")
            state = json.loads(line)
            if "error" in state:
                raise DemoFailed(f"hermes auth login failed: {state['error'].get('message')}")
            if state["state"] == "Code":
                say(state["copy_terminal"].replace("\n", " "))
                say(f"(the demo approves it on the portal as {DEMO_EMAIL})")
                portal.control(
                    "/_sim/device/approve", {"user_code": state["user_code"], "email": DEMO_EMAIL, "tier": DEMO_TIER}
                )
            elif state["state"] in TERMINAL_STATES:  # Waiting and Retrying go on
                login.wait(timeout=STEP_TIMEOUT)
                return state
    finally:
        if login.poll() is None:
            login.kill()
            login.wait(timeout=10)


def _read_lines(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    """Every line ``proc`` prints, then None once its output ends."""
    if proc.stdout is not None:
        for line in proc.stdout:
            lines.put(line)
    lines.put(None)
