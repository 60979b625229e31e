"""Fixtures for every tier; a tier's own live in its ``conftest.py``, helpers in ``tests/support/``."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support import parallel
from tests.support.in_process import in_process as in_process  # the fixture, for every tier

# pytest caches each test module it rewrites for its asserts only while Python may write bytecode:
# without the cache every run, and every parallel worker, rewrites them all again (a fifth of the
# unit tier). So this process writes it whatever PYTHONDONTWRITEBYTECODE says; the processes a
# test starts keep the environment's setting, so nothing is written into a clone an update swaps.
sys.dont_write_bytecode = False

# Hypothesis's per-example deadline is a timing assertion, and these machines are shared and noisy.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> parallel.TierScheduling:
    """Parallel workers share the tests as ``tests/support/parallel.py`` says."""
    return parallel.TierScheduling(config, log)


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


@pytest.fixture
def root(request: pytest.FixtureRequest, short_dir: Path):
    """An install's root home, made, under a short path. The test's ``root`` mark may ask for
    ``profiles`` (their homes are made too) and a ``run_dir`` (the private one sockets live in).
    A worker a test started on it (a login starts them detached) is stopped at the end, and
    one still running after that fails the test (``tests.support.workers``)."""
    from shared import homes
    from tests.support.workers import stop_and_check_workers

    path = short_dir / "home"
    path.mkdir()
    mark = request.node.get_closest_marker("root")
    wanted = mark.kwargs if mark else {}
    for profile in wanted.get("profiles", ()):
        (path / "profiles" / profile).mkdir(parents=True)
    if wanted.get("run_dir"):
        homes.ensure_run_dir(path)
    yield path
    stop_and_check_workers(path)


@pytest.fixture
def isolated_git(monkeypatch: pytest.MonkeyPatch) -> None:
    """No user or system git config (credential helpers, pull/merge defaults) leaks into a test."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


# --- the hook client: its intake, the clients a test builds, the reporters it binds ----------


@pytest.fixture
def intake(root):
    """The documented intake address of ``root``."""
    return f"ipc://{root}/run/hook_reporter.in"


@pytest.fixture
def hook_client():
    """Build HookClients; each is closed at the end, as the process's own is at exit."""
    from shared.hooks import HookClient

    clients: list[HookClient] = []

    def build(env: dict[str, str], root=None) -> HookClient:
        clients.append(HookClient(env, root))
        return clients[-1]

    yield build
    for client in clients:
        client.close()


@pytest.fixture
def bind_pull():
    """Bind PULL sockets (a reporter that reads only when the test does); closed at the end."""
    import zmq

    context = zmq.Context()
    sockets: list[zmq.Socket] = []

    def bound(address: str) -> zmq.Socket:
        sock = context.socket(zmq.PULL)
        sock.bind(address)
        sockets.append(sock)
        return sock

    yield bound
    for sock in sockets:
        sock.close(linger=0)
    context.term()


@pytest.fixture
def fallback_dirs():
    """Removes the per-home directories a test creates under the shared fallback bases."""
    created: list[Path] = []
    yield created
    for directory in created:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(params=["native", "psutil"])
def identity_backend(request, monkeypatch):
    """Run identity tests through /proc (on Linux) and through psutil."""
    from shared import identity

    if request.param == "native" and not sys.platform.startswith("linux"):
        pytest.skip("the native backend is /proc")
    monkeypatch.setattr(identity, "_LINUX", request.param == "native")
    return request.param


@pytest.fixture
def profile() -> str:
    """A profile name of a unit file: unique, so that find() never meets a real unit in the
    system-scope directories."""
    import secrets

    return f"hmtest-{secrets.token_hex(4)}"


@pytest.fixture
def user_dirs(tmp_path, monkeypatch) -> Path:
    """HOME and XDG_CONFIG_HOME of this process pointed at a temporary directory."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return tmp_path


@pytest.fixture
def launchd_dirs(tmp_path) -> dict[str, Path]:
    """Temporary LaunchAgents (user) and LaunchDaemons (system) directories."""
    made = {"user": tmp_path / "LaunchAgents", "system": tmp_path / "LaunchDaemons"}
    for directory in made.values():
        directory.mkdir()
    return made


@pytest.fixture
def fake_launchd(root):
    """launchctl and launchd for one test (``tests.support.launchd.FakeLaunchd``); every
    gateway it started is killed at the end."""
    from tests.support.launchd import FakeLaunchd

    fake = FakeLaunchd(root)
    yield fake
    fake.close()
