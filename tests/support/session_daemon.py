"""The operator session daemon simulator as the tests run it: a real process, a hook reporter
forwarding to it, and the daemon's own blocking client."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from services.hook_reporter import ops as reporter_ops
from shared import homes
from shared.operator.client import DaemonClient
from shared.operator.protocol import CLIENT_WINDOW, ENDPOINT_ENV
from shared.protocol import OpSpec, RemoteError
from shared.transport.sync_client import SyncClient
from tests.support.processes import ROOT, Peer, python_env, wait_for

HOST = "local"


class SessionDaemon:
    """``python -m simulators.operator_sim`` on an ipc address in ``directory``."""

    def __init__(self, directory: Path, *args: str, env: dict[str, str] | None = None, name: str = "daemon"):
        self.address = f"ipc://{directory}/{name}.ctl"
        self.argv = ["-m", "simulators.operator_sim", self.address, *args]
        self.env = env
        self.peer = Peer(self.argv, env=env)

    def call(
        self, spec: OpSpec, args: dict[str, Any] | None = None, *, timeout: float = 15.0, window=CLIENT_WINDOW
    ) -> Any:
        with DaemonClient(self.address, window=window) as client:
            return client.call(spec, args, timeout=timeout)

    def error(self, spec: OpSpec, args: dict[str, Any] | None = None, **kwargs: Any) -> RemoteError:
        """The typed error ``spec`` answers; fails the test when it succeeds."""
        try:
            result = self.call(spec, args, **kwargs)
        except RemoteError as exc:
            return exc
        raise AssertionError(f"{spec.name} succeeded: {result!r}")

    def restart(self) -> None:
        self.stop()
        self.peer = Peer(self.argv, env=self.env)

    def stop(self) -> int:
        """SIGTERM: the daemon stops every runtime before it exits."""
        if self.peer.proc.poll() is not None:
            return self.peer.proc.returncode
        return self.peer.terminate(timeout=30)

    def kill(self) -> None:
        self.peer.kill()


def start_reporter(root: Path, daemon: str | None) -> str:
    """A hook reporter for ``root`` forwarding to ``daemon``; returns its control address."""
    env = python_env(HERMES_HOME=str(root), **({ENDPOINT_ENV: daemon} if daemon else {}))
    subprocess.Popen(
        [sys.executable, "-m", "services.hook_reporter"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(root / "reporter.log", "ab"),
    )
    address = homes.endpoint(root, reporter_ops.SERVICE, create=False).control
    wait_for(lambda: _answers(address), timeout=20, what="the reporter")
    return address


def _answers(address: str) -> bool:
    try:
        with SyncClient(address) as client:
            client.call(reporter_ops.STATUS, timeout=2.0)
    except RemoteError:
        return False
    return True
