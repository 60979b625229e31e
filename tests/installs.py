"""A real install for end-to-end update tests: a clone of this checkout's committed tree with
an origin of its own, a developer clone that pushes releases, and a root home."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, GatewayProcess, python_env


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=dev", "-c", "user.email=dev@example.invalid", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


class Install:
    def __init__(self, base: Path):
        self.origin = base / "origin.git"
        self.path = base / "install"
        self.dev = base / "dev"
        self.root = base / "home"
        self.gateways: list[GatewayProcess] = []
        git(base, "clone", "-q", "--bare", str(ROOT), str(self.origin))
        git(base, "clone", "-q", str(self.origin), str(self.path))
        git(base, "clone", "-q", str(self.origin), str(self.dev))
        self.root.mkdir()

    def env(self, **extra: str) -> dict[str, str]:
        env = python_env(HERMES_HOME=str(self.root), **extra)
        env["PYTHONPATH"] = str(self.path)  # the install's code, not this checkout's
        return env

    def head(self) -> str:
        return git(self.path, "rev-parse", "HEAD")

    def release(self, message: str, edit=None) -> str:
        (self.dev / "RELEASE").write_text(message)
        if edit:
            edit(self.dev)
        git(self.dev, "add", "-A")
        git(self.dev, "commit", "-qm", message)
        git(self.dev, "push", "-q", "origin", "HEAD")
        return git(self.dev, "rev-parse", "HEAD")

    def hermes(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "hermes_cli.main", *args],
            cwd=self.path,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def gateway(self, profile: str) -> GatewayProcess:
        if profile != "default":
            (self.root / "profiles" / profile).mkdir(parents=True, exist_ok=True)
        gateway = GatewayProcess(self.root, profile, env=self.env(), cwd=self.path)
        self.gateways.append(gateway)
        gateway.wait_running()
        return gateway


def patch_release(path: Path, anchor: str, replacement: str) -> None:
    """Replace ``anchor``, which must appear exactly once, in a release's source file: a patch
    whose anchor moved fails here instead of quietly testing an unpatched release."""
    text = path.read_text()
    assert text.count(anchor) == 1, f"{path} holds {text.count(anchor)} copies of the patch anchor {anchor!r}"
    path.write_text(text.replace(anchor, replacement))
