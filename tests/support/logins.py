"""``hermes auth login nous`` as a real process against one install and one portal simulator:
its output read as it comes (a reader thread takes it off the pipe, so every wait is bounded),
and every output kept for the scan that no token leaked."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from pathlib import Path

from nous import store
from services.auth_worker import ops
from shared import homes
from shared.transport.call_rules import NO_RETRY
from shared.transport.sync_client import SyncClient
from tests.support.cli import HERMES
from tests.support.cli import hermes as run_hermes
from tests.support.portal import PortalSim
from tests.support.processes import ROOT, python_env


class Hermes:
    """``hermes`` commands against one install and one portal; keeps every output for the scan."""

    def __init__(self, root: Path, sim: PortalSim, portal_url: str | None = None):
        self.root, self.sim = root, sim
        self.portal_url = portal_url or sim.url
        self.outputs: list[str] = []

    def env(self) -> dict[str, str]:
        return python_env(HERMES_HOME=str(self.root), HERMES_PORTAL_URL=self.portal_url)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = run_hermes(*args, env=self.env())
        self.outputs += [done.stdout, done.stderr]
        return done

    def login(self, *extra: str, json_lines: bool = True) -> Login:
        return Login(self, extra, json_lines)

    def worker_status(self) -> dict:
        """The auth worker's ``status`` answer."""
        address = homes.endpoint(self.root, ops.SERVICE, create=False).control
        with SyncClient(address, retry=NO_RETRY) as client:
            return client.call(ops.STATUS, timeout=10)

    def email(self) -> str | None:
        return (store.read_account(self.root) or {}).get("email")


class Login:
    """``hermes auth login nous --no-browser`` running, with ``--json`` unless told otherwise:
    its stdout and stderr lines as they come."""

    def __init__(self, hermes: Hermes, extra: tuple[str, ...], json_lines: bool):
        self.hermes = hermes
        self.json_lines = json_lines
        argv = [*HERMES, "auth", "login", "nous", "--no-browser", *extra, *(["--json"] if json_lines else [])]
        self.proc = subprocess.Popen(
            argv, cwd=ROOT, env=hermes.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.states: list[dict] = []
        self.stderr = ""
        self._stderr_ended = False
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._errors: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_read, args=(self.proc.stdout, self._lines), daemon=True).start()
        threading.Thread(target=_read, args=(self.proc.stderr, self._errors), daemon=True).start()

    def next_line(self, timeout: float = 30) -> str:
        line = self._lines.get(timeout=timeout)
        assert line is not None, f"the login ended early: {self.proc.wait(10)} {self.stderr}{self._drain_stderr()}"
        self.hermes.outputs.append(line)
        return line

    def next_state(self, timeout: float = 30) -> dict:
        self.states.append(json.loads(self.next_line(timeout)))
        return self.states[-1]

    def until(self, name: str) -> dict:
        while (state := self.next_state()).get("state") != name:
            assert "error" not in state, state
        return state

    def until_line(self, text: str) -> str:
        """The next stdout line holding ``text``."""
        while text not in (line := self.next_line()):
            pass
        return line

    def until_stderr(self, text: str, timeout: float = 30) -> str:
        """The next stderr line holding ``text``."""
        while True:
            line = self._errors.get(timeout=timeout)
            if line is None:
                self._stderr_ended = True
            assert line is not None, f"the login ended early: {self.proc.wait(10)} {self.stderr}"
            self.stderr += line
            if text in line:
                return line

    def finish(self) -> tuple[int, dict]:
        """Wait for the end: the exit code and the last state (``--json``)."""
        code = self.proc.wait(timeout=60)
        while (line := self._lines.get(timeout=10)) is not None:
            self.hermes.outputs.append(line)
            if self.json_lines:
                self.states.append(json.loads(line))
        self._drain_stderr()
        self.hermes.outputs.append(self.stderr)
        return code, self.states[-1] if self.states else {}

    def _drain_stderr(self) -> str:
        while not self._stderr_ended and (line := self._errors.get(timeout=10)) is not None:
            self.stderr += line
        self._stderr_ended = True
        return self.stderr

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def _read(pipe, lines: queue.Queue[str | None]) -> None:
    """Every line of ``pipe``, then None once it ends."""
    for line in pipe:
        lines.put(line)
    lines.put(None)
