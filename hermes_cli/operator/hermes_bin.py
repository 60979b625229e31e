"""The target Hermes, run as its own process: its version (through the package's version probe,
the grammar the daemon's launch gate uses) and its supported plugin switch.

Each run has a bounded time, a minimal environment (the target home, nothing of this
process's secrets) and a capped output. Hermes YAML is never edited here: enabling goes through
``hermes plugins enable``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from shared.errors import HermesError
from shared.operator import version_probe
from shared.operator.manifests import VersionRange

VERSION_TIMEOUT = 5.0
SWITCH_TIMEOUT = 30.0
OUTPUT_CAP = 4096
_PASSED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "POHUNEK_STATE_DIR", "XDG_STATE_HOME")


class HermesUnusable(HermesError):
    code = "hermes_version_unsupported"

    def __init__(self, code: str, message: str, *, detail: dict[str, Any] | None = None) -> None:
        super().__init__(message, detail=detail)
        self.code = code


def default_bin() -> str:
    """The ``hermes`` beside this interpreter (this install's), else the first on PATH."""
    beside = Path(sys.executable).parent / "hermes"
    if os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("hermes") or str(beside)


def check_bin(path: str) -> str:
    if not os.path.isabs(path):
        raise HermesUnusable("hermes_not_executable", "--hermes-bin must be an absolute path")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise HermesUnusable("hermes_not_executable", "the Hermes executable is missing or not executable")
    return path


def env_for(home: Path) -> dict[str, str]:
    env = {key: os.environ[key] for key in _PASSED_ENV if key in os.environ}
    env["HERMES_HOME"] = str(home)
    return env


def version(path: str, probe: VersionRange, home: Path) -> dict[str, Any]:
    """``{bin, version, accepted}`` when the probe reads a release in the package's range;
    ``HermesUnusable`` otherwise."""
    check_bin(path)
    try:
        done = subprocess.run(
            [path, *probe.args],
            env=env_for(home),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=VERSION_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise HermesUnusable("hermes_version_unreadable", "hermes --version did not answer in time") from None
    except OSError:
        raise HermesUnusable("hermes_not_executable", "the Hermes executable cannot be run") from None
    try:
        found = version_probe.parse_version(done.stdout[:OUTPUT_CAP].decode("utf-8", "replace"))
    except version_probe.VersionProbeError:
        raise HermesUnusable("hermes_version_unreadable", "hermes --version does not read as a release") from None
    shown = version_probe.dotted(found)
    if not version_probe.accepts(found, probe.min, probe.below):
        raise HermesUnusable(
            "hermes_version_unsupported",
            f"Hermes Agent {shown} is outside the package's range "
            f"[{version_probe.dotted(probe.min)}, {version_probe.dotted(probe.below)})",
            detail={"version": shown},
        )
    return {"bin": path, "version": shown, "accepted": True}


def switch_plugin(path: str, home: Path, name: str, enabled: bool) -> None:
    """``hermes plugins enable|disable NAME`` in the target home; ``HermesUnusable`` when it fails."""
    verb = "enable" if enabled else "disable"
    try:
        done = subprocess.run(
            [path, "plugins", verb, name, "--json"],
            env=env_for(home),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=SWITCH_TIMEOUT,
            check=False,
        )
    except (subprocess.TimeoutExpired, OSError):
        raise HermesUnusable("plugin_switch_failed", f"hermes plugins {verb} did not complete") from None
    if done.returncode != 0:
        raise HermesUnusable(
            "plugin_switch_failed", f"hermes plugins {verb} failed (exit {done.returncode})", detail={"verb": verb}
        )
