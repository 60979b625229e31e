"""The real Hermes Agent, installed from the package registry into a throwaway environment.

The environment is made once per checkout (``.cache/real-hermes/``, under a lock, marked done
only when the install finished) and reused by every test of a run. Every real ``hermes``
command runs in a private network namespace: the real CLI checks for updates on its own, and
a test must never leave the machine nor wait on a dropped packet. Its environment is the one
the operator's compatibility harness gives it: nothing inherited but the launch minimum, a
temporary ``HOME`` and ``HERMES_HOME``, ``NO_COLOR=1``, ``TERM=dumb``, ``LC_ALL=C.UTF-8``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.processes import ROOT

CACHE = ROOT / ".cache" / "real-hermes"
PACKAGE = "hermes-agent"
INSTALL_TIMEOUT = 900.0
COMMAND_TIMEOUT = 60.0
DONE = "installed"


@dataclass(frozen=True)
class RealHermes:
    """One installed real Hermes Agent: its ``hermes`` executable and its own Python."""

    venv: Path
    version: str

    @property
    def bin(self) -> Path:
        return self.venv / "bin" / "hermes"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python3"

    def run(
        self,
        args: list[str],
        *,
        home: Path,
        hermes_home: Path | None = None,
        program: Path | None = None,
        extra_env: dict[str, str] | None = None,
        timeout: float = COMMAND_TIMEOUT,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``hermes ARGS`` (or ``program ARGS``) offline, in the harness's environment."""
        env = isolated_env(home, hermes_home if hermes_home is not None else home / ".hermes")
        env.update(extra_env or {})
        argv = [*offline_prefix(), str(program or self.bin), *args]
        return subprocess.run(argv, env=env, cwd=str(home), capture_output=True, text=True, timeout=timeout)


def isolated_env(home: Path, hermes_home: Path) -> dict[str, str]:
    """The environment the operator's harness gives Hermes: temporary homes, no colour, a dumb
    terminal, a UTF-8 locale, and nothing of this process's own."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "HERMES_HOME": str(hermes_home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "NO_COLOR": "1",
        "TERM": "dumb",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def offline_prefix() -> list[str]:
    """The command prefix that gives a child a network namespace of its own (loopback only)."""
    return ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-rn"]


def offline_unavailable() -> str | None:
    """Why this machine cannot run a command without a network, or None."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is missing: a real hermes would reach the network"
    probe = subprocess.run([*offline_prefix(), "true"], capture_output=True, text=True, timeout=20)
    if probe.returncode != 0:
        return f"a private network namespace is refused here: {probe.stderr.strip()[:200]}"
    return None


def installed() -> RealHermes | str:
    """The real Hermes Agent, installing it first if this checkout has none yet; or the line
    that says why it cannot be had (the package registry unreachable)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    venv = CACHE / "venv"
    with open(CACHE / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install even when several test processes start at once
        if not (CACHE / DONE).exists():
            why = _install(venv)
            if why is not None:
                return why
        version = (CACHE / DONE).read_text().strip()
    return RealHermes(venv=venv, version=version)


def _install(venv: Path) -> str | None:
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python3"), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    done = subprocess.run([*pip, PACKAGE], capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
    if done.returncode != 0:
        shutil.rmtree(venv, ignore_errors=True)
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return f"the package registry did not serve {PACKAGE}: " + " | ".join(tail)
    show = subprocess.run(
        [str(venv / "bin" / "python3"), "-c", "import importlib.metadata as m; print(m.version('hermes-agent'))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    stamp = CACHE / (DONE + ".tmp")
    stamp.write_text(show.stdout.strip() + "\n")
    os.replace(stamp, CACHE / DONE)
    return None
