from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from shared.spawn import first_line

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def short_dir():
    """A private directory with a short path: ipc socket paths must fit in 107 bytes,
    and pytest's own tmp_path can be longer than that."""
    path = Path(tempfile.mkdtemp(prefix="hm-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def endpoint(short_dir):
    """An ipc address and its lock file."""
    return f"ipc://{short_dir}/svc.ctl", short_dir / "svc.lock"


def python_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


class Peer:
    """A real child process that prints one ready line before it serves."""

    def __init__(self, argv: list[str], *, env: dict[str, str] | None = None):
        self.proc = subprocess.Popen(
            [sys.executable, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env or python_env()
        )
        line = first_line(self.proc, 20) or "(no ready line in time)"
        if not line.startswith("ready"):
            self.kill()
            raise RuntimeError(f"peer did not start: {line!r} {self.proc.stderr.read().decode()[-2000:]}")
        self.pid = self.proc.pid

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)

    def terminate(self, timeout: float = 10) -> int:
        self.proc.terminate()
        return self.proc.wait(timeout=timeout)


@pytest.fixture
def spawn():
    peers: list[Peer] = []

    def start(*argv: str, env: dict[str, str] | None = None) -> Peer:
        peer = Peer(list(argv), env=env)
        peers.append(peer)
        return peer

    yield start
    for peer in peers:
        peer.kill()


def git(repo: Path, *args: str) -> str:
    """``git -C repo args``: its stdout, stripped; a failure fails the test."""
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def isolated_git(monkeypatch: pytest.MonkeyPatch) -> None:
    """No user or system git config (credential helpers, pull/merge defaults) leaks into a test."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


@pytest.fixture
def code(short_dir) -> Path:
    """A clone of this checkout for the gateways to run: its commits are the releases."""
    clone = short_dir / "code"
    # Copied, not hard-linked: git freshens an object it writes again by touching its file, and
    # a hard link would carry that into every other clone of this checkout.
    clone_argv = ["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)]
    subprocess.run(clone_argv, check=True, timeout=60, env=clean_git_env())
    return clone


def clean_git_env() -> dict[str, str]:
    return {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def release(code: Path) -> str:
    """A new commit in the clone: the code a restart must bring the gateways onto."""
    git = ["git", "-C", str(code), "-c", "user.name=dev", "-c", "user.email=dev@example.invalid"]
    subprocess.run(
        [*git, "commit", "-q", "--allow-empty", "-m", "release"], check=True, timeout=60, env=clean_git_env()
    )
    return subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()


def wait_for(predicate, *, timeout: float, interval: float = 0.05, what: str = "condition"):
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def read_state(home: Path) -> dict | None:
    """The gateway's state file, or None while it is absent."""
    from shared.files import read_json

    return read_json(home / "gateway_state.json", default=None)


class GatewayProcess:
    """A real gateway process (``python -m services.gateway``) for one profile home."""

    def __init__(self, root: Path, profile: str, *, env: dict[str, str] | None = None, cwd: Path = ROOT):
        from shared import homes

        self.root, self.profile = root, profile
        self.home = homes.profile_home(profile, root)
        self.home.mkdir(parents=True, exist_ok=True)
        environment = env or python_env()
        environment["HERMES_HOME"] = str(self.home)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.gateway"],
            cwd=cwd,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.pid = self.proc.pid
        self.endpoint = homes.endpoint(self.home, "gateway")

    def wait_running(self, timeout: float = 20) -> dict:
        def running():
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"gateway exited {self.proc.returncode}: {self.proc.stderr.read().decode()[-2000:]}"
                )
            state = read_state(self.home)
            return state if state and state["pid"] == self.pid and state["gateway_state"] == "running" else None

        return wait_for(running, timeout=timeout, what=f"gateway {self.profile} running")

    def wait_exit(self, timeout: float = 30) -> int:
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def gateways():
    """Start real gateways; every one still alive at the end of the test is killed."""
    started: list[GatewayProcess] = []

    def start(root: Path, profile: str = "default", **kwargs) -> GatewayProcess:
        gateway = GatewayProcess(root, profile, **kwargs)
        started.append(gateway)
        gateway.wait_running()
        return gateway

    yield start
    for gateway in started:
        gateway.kill()


@pytest.fixture
def sim(tmp_path):
    """A running portal simulator that lets clients poll as fast as they like."""
    from tests.portal import PortalSim

    with PortalSim(tmp_path / "portal") as sim:
        sim.configure(interval=0)
        yield sim


@pytest.fixture
def install(short_dir):
    """An install, its origin and its home; every gateway it started is killed and its mesh stopped."""
    from tests.installs import Install  # it builds on this module

    built = Install(short_dir)
    yield built
    for gateway in built.gateways:
        gateway.kill()
    subprocess.run(
        [sys.executable, "-m", "hermes_cli.main", "mesh", "down"],
        cwd=built.path,
        env=built.env(),
        capture_output=True,
        timeout=120,
    )
