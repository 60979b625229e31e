"""Real installs for end-to-end tests and benchmarks: git run the way every caller needs it,
a clone of this checkout whose commits are releases, and a whole install (a clone of this
checkout's committed tree with an origin of its own, a developer clone that pushes releases,
and a root home)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.support.cli import HERMES, hermes, hermes_json
from tests.support.processes import ROOT, GatewayProcess, python_env, wait_for
from tests.support.workers import stop_and_check_workers

GIT_TIMEOUT = 120.0


def isolated_git_env(**extra: str) -> dict[str, str]:
    """This process's environment with no user or system git config (hooks, credential
    helpers, pull defaults), for git runs of ours and of the code under test."""
    return {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", **extra}


def git(cwd: Path, *args: str) -> str:
    """``git args`` in ``cwd`` as a developer with a name, without user or system config: its
    stdout, stripped. A failure, or a git still running after two minutes, fails the caller."""
    done = subprocess.run(
        ["git", "-c", "user.name=dev", "-c", "user.email=dev@example.invalid", *args],
        cwd=cwd,
        env=isolated_git_env(),
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT,
    )
    if done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} in {cwd} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout.strip()


def clone_checkout(path: Path) -> Path:
    """A clone of this checkout at ``path`` for gateways to run: its commits are the releases."""
    # Copied, not hard-linked: git freshens an object it writes again by touching its file, and
    # a hard link would carry that into every other clone of this checkout.
    git(path.parent, "clone", "-q", "--no-hardlinks", str(ROOT), str(path))
    return path


def release(code: Path) -> str:
    """A new commit in the clone: the code a restart must bring the gateways onto."""
    git(code, "commit", "-q", "--allow-empty", "-m", "release")
    return git(code, "rev-parse", "HEAD")


NO_CANARY = "update:\n  canary: false\n"


class Install:
    """An origin, the install cloned from it, a dev clone that pushes releases, and the root
    home, under ``base``; every gateway it started is listed in ``gateways``.

    Its root's config.yaml turns the canary off (``NO_CANARY``): the canary's own tests turn
    it on, and every other update would wait out its window."""

    def __init__(self, base: Path):
        self.base = base
        self.origin = base / "origin.git"
        self.path = base / "install"
        self.dev = base / "dev"
        self.root = base / "home"
        self.gateways: list[GatewayProcess] = []
        base.mkdir(parents=True, exist_ok=True)
        git(base, "clone", "-q", "--bare", str(ROOT), str(self.origin))
        git(base, "clone", "-q", str(self.origin), str(self.path))
        git(base, "clone", "-q", str(self.origin), str(self.dev))
        self.root.mkdir()
        (self.root / "config.yaml").write_text(NO_CANARY)

    def env(self, **extra: str) -> dict[str, str]:
        """The install's environment: its root home, its code (not this checkout's), no user or
        system git config for the updater's git, and bytecode written as an operator's
        processes write it (a machine's PYTHONDONTWRITEBYTECODE would have every process of
        the install compile its imports from source)."""
        env = python_env(HERMES_HOME=str(self.root), GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", **extra)
        env["PYTHONPATH"] = str(self.path)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        return env

    def head(self) -> str:
        return git(self.path, "rev-parse", "HEAD")

    def release(self, message: str, edit: Callable[[Path], Any] | None = None) -> str:
        """Push a new commit from the dev clone (``edit`` changes its tree first); its sha."""
        (self.dev / "RELEASE").write_text(message)
        if edit:
            edit(self.dev)
        git(self.dev, "add", "-A")
        git(self.dev, "commit", "-qm", message)
        git(self.dev, "push", "-q", "origin", "HEAD")
        return git(self.dev, "rev-parse", "HEAD")

    def hermes(self, *args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
        """``hermes ARGS`` in the install, on its code and root, with ``env`` added."""
        return hermes(*args, env=self.env(**env), cwd=self.path, timeout=timeout)

    def hermes_json(self, *args: str, timeout: float = 300, **env: str) -> tuple[int, Any]:
        """``hermes ARGS --json`` in the install with ``env`` added: its exit code and document."""
        return hermes_json(*args, env=self.env(**env), cwd=self.path, timeout=timeout)

    def gateway(self, profile: str, *, serve: Sequence[str] | None = None) -> GatewayProcess:
        """A gateway of ``profile`` on the install's code, once it runs; with ``serve``, a
        multiplex gateway serving those profiles, launched in ``profile``'s home."""
        if profile != "default":
            (self.root / "profiles" / profile).mkdir(parents=True, exist_ok=True)
        gateway = GatewayProcess(self.root, profile, env=self.env(), cwd=self.path, serve=serve)
        self.gateways.append(gateway)
        gateway.wait_running()
        return gateway

    def stop(self) -> None:
        """Kill every gateway it started and bring its mesh down; a worker still running
        after that fails the test (``tests.support.workers``)."""
        for gateway in self.gateways:
            gateway.kill()
        self.hermes("mesh", "down", timeout=120)
        stop_and_check_workers(self.root)


def owed_warnings(install: Install) -> list[str]:
    """The warning lines of an ordinary command in ``install`` (its stdout stays the JSON document)."""
    listed = install.hermes("profile", "list", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)["root"] == str(install.root)
    return [line for line in listed.stderr.splitlines() if line.startswith("⚠")]


def start_update(install: Install, *args: str, json_output: bool = True, **env: str) -> subprocess.Popen[str]:
    """``hermes update --yes [--json] ARGS`` in ``install`` with ``env`` added, running: its
    output on pipes."""
    return subprocess.Popen(
        [*HERMES, "update", "--yes", *(["--json"] if json_output else []), *args],
        cwd=install.path,
        env=install.env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def updater_pid(install: Install) -> int:
    """The pid of the updater that holds ``install``'s update lock, once one does."""
    from services.updater.lock import holder

    return wait_for(lambda: (holder(install.root) or {}).get("pid"), timeout=60, what="the updater to hold the lock")


def kill_updater_in_completion(install: Install, *args: str) -> None:
    """Run ``hermes update ARGS`` and kill -9 the updater (not the CLI) once its completion runs,
    after the commit point; return once the orphaned completion, which shares the lock, is done."""
    from services.updater.lock import holder

    proc = start_update(install, *args, json_output=False)  # the text mode's progress names the step
    try:

        def completion_started() -> bool:
            line = proc.stderr.readline() if proc.stderr else ""
            return "completion" in line and "started" in line

        wait_for(completion_started, timeout=60, interval=0, what="the completion to start")
        updater = holder(install.root)
        assert updater and updater["pid"]
        os.kill(updater["pid"], signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    wait_for(lambda: holder(install.root) is None, timeout=120, what="the orphaned completion to finish")


def kill_updater_paused_at(install: Install, point: str, *args: str, timeout: float = 60) -> None:
    """Run ``hermes update ARGS`` with the updater paused at fault point ``point``, then kill -9
    the updater there (``shared.faults``); return once the command has ended."""
    update = start_update(install, *args, HERMES_FAULT_PAUSE_AT=point)
    try:
        updater = updater_pid(install)
        log = install.root / "logs" / "update.log"
        wait_for(lambda: f"paused {point}" in log.read_text(), timeout=timeout, what=f"the updater at {point}")
        os.kill(updater, signal.SIGKILL)
        update.wait(timeout)
    finally:
        if update.poll() is None:
            update.kill()


def confirm_rollback(root: Path, update_id: str) -> dict[str, Any] | None:
    """The finished receipt of the rollback a confirm's timer started for ``update_id``, if any."""
    from services.updater import ReceiptStore

    receipts, _ = ReceiptStore(root).all()
    for receipt in receipts:
        data = receipt.to_dict()
        expired = [s for s in data["steps"] if s["name"] == "confirm-expired"]
        if expired and expired[0]["detail"]["update_id"] == update_id and data.get("exit_code") is not None:
            return data
    return None
