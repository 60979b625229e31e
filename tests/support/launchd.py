"""launchd for the restart tests, on a machine that has none: jobs written by ``render`` into
temporary LaunchAgents and LaunchDaemons directories, and a recording ``launchctl`` whose
launchd part is played by real gateways."""

from __future__ import annotations

import plistlib
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from fleet.supervisors import launchd
from services.updater.restart.base import Waits
from shared import exit_codes
from shared.version import code_sha
from tests.support.processes import ROOT, GatewayProcess, python_env

UID = 501


SHA = code_sha(ROOT)  # what a gateway started from this checkout reports


# Long enough for a real gateway to start on a loaded 2-core machine; it bounds only the
# cases that must wait it out (a gateway that never comes back).
SHORT = Waits(drain=5.0, come_back=10.0, poll=0.05)


def write_job(launchd_dirs: dict[str, Path], scope: str, profile: str, home: Path, *, label: str | None = None) -> Path:
    """``render``'s plist for ``profile`` running on ``home``, filed under ``label`` (its own by default)."""
    path = launchd_dirs[scope] / f"{label or launchd.unit_name(profile)}.plist"
    path.write_bytes(launchd.render(profile, home, scope=scope))
    return path


def write_plist(path: Path, job: object) -> Path:
    path.write_bytes(plistlib.dumps(job))
    return path


class FakeLaunchd:
    """launchctl and launchd for one test. Every argv is recorded; ``print`` succeeds for the
    targets in ``loaded``; ``kickstart -k`` and ``bootstrap`` of a target run ``on[target]``.
    ``keep_alive`` starts a gateway again when it exits 75, as KeepAlive does."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.calls: list[list[str]] = []
        self.loaded: set[str] = set()
        self.on: dict[str, Callable[[], object]] = {}
        self.processes: list[GatewayProcess] = []
        self._lock = threading.Lock()
        self._closed = False

    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        with self._lock:
            self.calls.append(list(argv))
        verb = argv[1]
        if verb == "print":
            return subprocess.CompletedProcess(argv, 0 if argv[2] in self.loaded else 113, "", "")
        target = argv[-1] if verb == "kickstart" else f"{argv[2]}/{Path(argv[3]).stem}"
        if target in self.on:
            self.on[target]()
        return subprocess.CompletedProcess(argv, 0, "", "")

    def spawn(self, profile: str) -> GatewayProcess | None:
        """A real gateway for ``profile``'s home, not waited for: launchd does not wait either."""
        with self._lock:
            if self._closed:
                return None
            gateway = GatewayProcess(self.root, profile, env=python_env(HERMES_SUPERVISOR="launchd"))
            self.processes.append(gateway)
            return gateway

    def start(self, profile: str) -> GatewayProcess:
        gateway = self.spawn(profile)
        gateway.wait_running()
        return gateway

    def keep_alive(self, gateway: GatewayProcess) -> None:
        def watch() -> None:
            if gateway.proc.wait() == exit_codes.PLANNED_RESTART:
                self.spawn(gateway.profile)

        threading.Thread(target=watch, daemon=True).start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        for gateway in self.processes:
            gateway.kill()


def target(label: str, scope: str = "user") -> str:
    return f"{'system' if scope == 'system' else f'gui/{UID}'}/{label}"


def mixed_fleet(root: Path, launchd_dirs: dict[str, Path], tmp_path: Path) -> None:
    """Our jobs (default and work as user agents, batch as a daemon) among lookalikes."""
    write_job(launchd_dirs, "user", "default", root)
    write_job(launchd_dirs, "user", "work", root / "profiles" / "work")
    write_job(launchd_dirs, "system", "batch", root / "profiles" / "batch")
    # Lookalikes: a label that only starts like ours, a prefix sibling running work's home,
    # "default" spelled with a suffix, a sibling install's job, a second job for work's home.
    write_plist(
        launchd_dirs["user"] / "ai.hermes.gatewayd.plist",
        {"Label": "ai.hermes.gatewayd", "EnvironmentVariables": {"HERMES_HOME": str(root)}},
    )
    write_job(launchd_dirs, "user", "workbench", root / "profiles" / "work")
    write_job(launchd_dirs, "user", "default", root, label="ai.hermes.gateway-default")
    write_job(launchd_dirs, "user", "ops", tmp_path / "other-install" / "profiles" / "ops")
    write_job(launchd_dirs, "system", "work", root / "profiles" / "work")
