"""Real child processes that run this checkout: their environment, a peer that says when it
is ready, a gateway, and a bounded wait for what they do."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import psutil

from shared.errors import HermesError
from shared.spawn import first_line
from shared.version import PACKAGES as PACKAGES  # the layer test and the update tests read it here

ROOT = Path(__file__).resolve().parent.parent.parent

T = TypeVar("T")


def python_env(**extra: str) -> dict[str, str]:
    """This process's environment with this checkout first on ``PYTHONPATH``, and ``extra``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def wait_for(predicate: Callable[[], T], *, timeout: float, interval: float = 0.05, what: str = "condition") -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class Peer:
    """A real child process that prints one ready line before it serves."""

    def __init__(self, argv: list[str], *, env: dict[str, str] | None = None):
        self.proc = subprocess.Popen(
            [sys.executable, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env or python_env()
        )
        line = first_line(self.proc, 20) or "(no ready line in time)"
        if not line.startswith("ready"):
            self.kill()
            assert self.proc.stderr is not None
            raise RuntimeError(f"peer did not start: {line!r} {self.proc.stderr.read().decode()[-2000:]}")
        self.pid = self.proc.pid

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)

    def terminate(self, timeout: float = 10) -> int:
        self.proc.terminate()
        return self.proc.wait(timeout=timeout)


def parallel(functions):
    """Run blocking calls in threads; return their results (or exceptions) in order."""
    results: list = [None] * len(functions)

    def run(i, fn):
        try:
            results[i] = fn()
        except Exception as exc:  # collected and asserted on by the test
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(functions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def read_state(home: Path) -> dict[str, Any] | None:
    """The gateway's state file, or None while it is absent."""
    from shared.files import read_json

    return read_json(home / "gateway_state.json", default=None)


class GatewayProcess:
    """A real gateway process (``python -m services.gateway``, run by ``python``) for one profile
    home; with ``serve``, a multiplex gateway serving those profiles, launched in ``profile``'s home."""

    def __init__(
        self,
        root: Path,
        profile: str,
        *,
        env: dict[str, str] | None = None,
        cwd: Path = ROOT,
        serve: Sequence[str] | None = None,
        python: str = sys.executable,
    ):
        from shared import homes

        self.root, self.profile = root, profile
        self.home = homes.profile_home(profile, root)
        self.home.mkdir(parents=True, exist_ok=True)
        try:  # as the process will read it; a set it refuses is kept as given
            self.served = homes.parse_served(",".join(serve)) if serve else (profile,)
        except HermesError:
            self.served = tuple(serve or ())
        environment = env or python_env()
        environment["HERMES_HOME"] = str(self.home)
        extra = ["--serve", ",".join(serve)] if serve else []
        self.proc = subprocess.Popen(
            [python, "-m", "services.gateway", *extra],
            cwd=cwd,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.pid = self.proc.pid
        self.endpoint = homes.endpoint(self.home, "gateway")

    def homes(self) -> dict[str, Path]:
        from shared import homes

        return {name: homes.profile_home(name, self.root) for name in self.served}

    def wait_running(self, timeout: float = 20) -> dict[str, Any]:
        """The first served profile's state file, once every served one says this process runs it."""

        def running() -> dict[str, Any] | None:
            if self.proc.poll() is not None:
                assert self.proc.stderr is not None
                raise AssertionError(
                    f"gateway exited {self.proc.returncode}: {self.proc.stderr.read().decode()[-2000:]}"
                )
            states = {name: read_state(home) for name, home in self.homes().items()}
            if all(s and s["pid"] == self.pid and s["gateway_state"] == "running" for s in states.values()):
                return states[self.served[0]]
            return None

        return wait_for(running, timeout=timeout, what=f"gateway {', '.join(self.served)} running")

    def wait_paused(self, step: str, timeout: float = 20) -> None:
        """Return once the process says it is held at ``step`` (``HERMES_FAULT_PAUSE_AT``);
        a re-executed image says it on the same stderr."""
        assert self.proc.stderr is not None
        fd, said, wanted = self.proc.stderr.fileno(), b"", f"paused {step}\n".encode()
        deadline = time.monotonic() + timeout
        while wanted not in said:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out after {timeout}s waiting for the gateway to pause at {step}")
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise AssertionError(f"gateway exited before pausing at {step}: {said.decode()[-2000:]}")
                said += chunk

    def wait_exit(self, timeout: float = 30) -> int:
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


def gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie counts: it only waits to be reaped)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def holds_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` open: a ``shared.files.locked`` caller has its lock
    file open for as long as it waits for that lock."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd) == str(path):
                return True
        except OSError:
            continue
    return False


def kill(pid: int, timeout: float = 120) -> list[int]:
    """SIGKILL ``pid``; returns the processes it had started (git, a gate, a completion),
    orphaned by the kill, for the caller to wait on once it has let them go."""
    orphans = [child.pid for child in psutil.Process(pid).children(recursive=True)]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda p=pid: gone(p), timeout=timeout, what=f"pid {pid} to die")
    return orphans
