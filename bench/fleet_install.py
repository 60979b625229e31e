"""The update-fleet benchmark's throwaway install (``tests.support.installs.Install``, its
processes logging only warnings and running on bytecode, as an operator's install does), and
cleaning up after a run whatever state it is in."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from shared import homes
from shared.gateways import ops
from shared.protocol import RemoteError
from shared.transport.sync_client import SyncClient
from tests.support.cli import HERMES
from tests.support.installs import Install

CLI_TIMEOUT = 120.0


CLEANUP_TIMEOUT = 60.0
COMPILE_TIMEOUT = 300.0

# What would keep the install's processes from reading and writing bytecode next to its
# sources (this machine's environment sets the first): an operator's install has neither.
NO_BYTECODE = ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")


WARM_UP_TIMEOUT = 60.0  # every gateway must complete a turn before the update starts


class FleetInstall(Install):
    """A throwaway install (``tests.support.installs.Install``: an origin, the install cloned
    from it and a dev clone, under ``base``) whose processes log only warnings. Its code is
    compiled once it is cloned, as an installer compiles a package, and every process it
    starts (the CLI, and through it supervisord, the gateways, the updater and its completion)
    reads and writes bytecode in the install's own ``__pycache__``."""

    def __init__(self, base: Path):
        super().__init__(base)
        self.mesh_started = False
        self.compile()

    def env(self, **extra: str) -> dict[str, str]:
        env = super().env(HERMES_LOG_LEVEL="WARNING", **extra)
        for name in NO_BYTECODE:
            env.pop(name, None)
        return env

    def compile(self) -> None:
        """Bytecode for the install's packages, as ``scripts/setup.sh`` and an update write it."""
        done = subprocess.run(
            [sys.executable, "-m", "services.updater.bytecode", str(self.path)],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=COMPILE_TIMEOUT,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"the bytecode sweep exited {done.returncode}: {(done.stdout + done.stderr).strip()[-2000:]}"
            )

    def checked(self, *args: str, timeout: float = CLI_TIMEOUT) -> str:
        done = self.hermes(*args, timeout=timeout)
        if done.returncode != 0:
            output = (done.stdout + done.stderr).strip()[-2000:]
            raise RuntimeError(f"hermes {' '.join(args)} exited {done.returncode}: {output}")
        return done.stdout

    def update_argv(self) -> list[str]:
        return [*HERMES, "update", "--yes", "--json"]

    def address(self, profile: str) -> str:
        return homes.endpoint(homes.profile_home(profile, self.root), ops.SERVICE, create=False).control

    def events(self, profile: str) -> str:
        return homes.endpoint(homes.profile_home(profile, self.root), ops.SERVICE, create=False).events

    def status(self, profile: str) -> dict[str, Any]:
        with SyncClient(self.address(profile)) as client:
            return client.call(ops.STATUS, timeout=5.0)

    def wait_serving(self, profiles: list[str], timeout: float = WARM_UP_TIMEOUT) -> dict[str, dict[str, Any]]:
        """Each gateway's status once it answers as running. ``mesh up`` returns when
        supervisord counts a program as RUNNING (up for ``startsecs``), which on a busy
        machine can be before the gateway has bound its socket."""
        deadline = time.monotonic() + timeout
        found: dict[str, dict[str, Any]] = {}
        while len(found) < len(profiles):
            for profile in profiles:
                if profile in found:
                    continue
                try:
                    status = self.status(profile)
                except RemoteError:
                    continue
                if status.get("state") == ops.RUNNING:
                    found[profile] = status
            if len(found) < len(profiles):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"gateways not serving after {timeout:g}s: {sorted(set(profiles) - set(found))}")
                time.sleep(0.1)
        return found


def in_throwaway_install(prefix: str, measure: Callable[[FleetInstall], dict[str, Any]]) -> dict[str, Any]:
    """``measure`` on a new install under a temporary directory, which is stopped and removed
    whatever happens; its document, with the notes the clean-up made."""
    base = Path(tempfile.mkdtemp(prefix=prefix))  # short: ipc paths must fit in 107 bytes
    notes: list[str] = []
    install = None
    try:
        install = FleetInstall(base)
        doc = measure(install)
    finally:
        cleanup(install, base, notes)
    doc["notes"] = notes
    return doc


def cleanup(install: FleetInstall | None, base: Path, notes: list[str]) -> None:
    """Everything this run started, whatever state it is in (``stop``); then the directory itself."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not skip this
    try:
        stop(install, base, notes)
        shutil.rmtree(base, ignore_errors=True)
    finally:
        signal.signal(signal.SIGINT, previous)


def stop(install: FleetInstall | None, base: Path, notes: list[str]) -> None:
    """Every process this install runs, leaving its files for the next run: an update still
    running (its updater is asked to stop, as ``kill -INT`` does), the mesh, any process left
    with a home or working directory under ``base``. Every wait is bounded."""
    if install is not None and install.root.exists():
        _stop_update(install, notes)
        if install.mesh_started:
            try:
                down = install.hermes("mesh", "down", "--json", timeout=CLEANUP_TIMEOUT)
                if down.returncode != 0:
                    notes.append(f"mesh down exited {down.returncode}: {down.stderr.strip()[-300:]}")
            except subprocess.TimeoutExpired:
                notes.append(f"mesh down took over {CLEANUP_TIMEOUT:g}s")
            install.mesh_started = False
    _kill_leftovers(base, notes)


def _stop_update(install: FleetInstall, notes: list[str]) -> None:
    from services.updater.lock import holder

    running = holder(install.root)
    if not running or not running.get("pid"):
        return
    notes.append(f"an update was still running (pid {running['pid']}); interrupting it")
    try:
        os.kill(running["pid"], signal.SIGINT)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + CLEANUP_TIMEOUT
    while holder(install.root) and time.monotonic() < deadline:
        time.sleep(0.2)


def _ours(proc: psutil.Process, base: str) -> bool:
    try:
        if proc.pid == os.getpid():
            return False
        home = proc.environ().get("HERMES_HOME", "")
        cwd = proc.cwd()
    except (psutil.Error, OSError):
        return False
    return home.startswith(base) or cwd.startswith(base)


def _kill_leftovers(base: Path, notes: list[str]) -> None:
    prefix = str(base) + os.sep
    leftovers = [p for p in psutil.process_iter() if _ours(p, prefix)]
    if not leftovers:
        return
    notes.append(f"stopped leftover processes: {sorted(p.pid for p in leftovers)}")
    for proc in leftovers:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(leftovers, timeout=10)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=10)
