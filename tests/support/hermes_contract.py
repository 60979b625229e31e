"""The real operator's Hermes 0.20.0 compatibility contract, as its harness publishes it.

``tests/compat/hermes_0_20/`` holds, unchanged, the lock (``compatibility-lock.json``: the CLI
checks, the plugin contract) and the ten PTY transcripts of the real Hermes 0.20.0 with their
manifest, from the operator daemon's repository (MIT, see ``LICENSE`` there). A transcript is
read only after its SHA-256 matches the manifest's, so an edited copy cannot pass for the real one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DIR = Path(__file__).resolve().parent.parent / "compat" / "hermes_0_20"


def lock() -> dict[str, Any]:
    return json.loads((DIR / "compatibility-lock.json").read_text())


@dataclass(frozen=True)
class Golden:
    """One transcript: its state id, its mode, whether it was captured, its header fields and
    the linearised screen text below ``raw_transcript:``."""

    id: str
    mode: str
    status: str
    header: dict[str, str]
    transcript: str


def goldens() -> list[Golden]:
    manifest = json.loads((DIR / "goldens" / "manifest.json").read_text())
    found = []
    for record in manifest["records"]:
        raw = (DIR / "goldens" / record["file"]).read_bytes()
        if hashlib.sha256(raw).hexdigest() != record["sha256"]:
            raise AssertionError(f"golden {record['file']} does not match the manifest's SHA-256")
        text = raw.decode("utf-8")
        head, _, body = text.partition("raw_transcript:\n")
        header = dict(line.split(": ", 1) for line in head.splitlines() if ": " in line and not line.startswith("#"))
        found.append(Golden(record["id"], record["mode"], record["status"], header, body))
    return found


def harness_env(root: Path, closed_port: int) -> dict[str, str]:
    """The environment the operator's harness runs ``hermes`` in for a CLI check (its
    ``Isolation``, model-free): nothing inherited but ``PATH``, every home and cache under
    ``root``, no colour, a dumb terminal, a UTF-8 locale, lazy installs off, and every proxy
    pointed at ``closed_port`` on loopback, so nothing reaches the network."""
    from tests.support.real_hermes import isolated_env

    env = isolated_env(root / "home", root / "hermes-home")
    env.update(
        {
            "XDG_CONFIG_HOME": str(root / "xdg-config"),
            "XDG_CACHE_HOME": str(root / "xdg-cache"),
            "XDG_DATA_HOME": str(root / "xdg-data"),
            "PYTHONUSERBASE": str(root / "python-user"),
            "PYTHONPYCACHEPREFIX": str(root / "python-cache"),
            "UV_CACHE_DIR": str(root / "uv-cache"),
            "DBUS_SESSION_BUS_ADDRESS": f"unix:path={root / 'no-session-bus'}",
            "PYTHONNOUSERSITE": "1",
            "LANG": "C.UTF-8",
            "HERMES_DISABLE_LAZY_INSTALLS": "1",
            "HERMES_SKIP_NODE_BOOTSTRAP": "1",
            "TIRITH_ENABLED": "0",
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }
    )
    del env["XDG_STATE_HOME"]  # the harness sets none
    proxy = f"http://127.0.0.1:{closed_port}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        env[name] = proxy
    return env


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then let go)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_cli_check(argv: list[str], check: dict[str, Any], root: Path) -> list[str]:
    """One of the lock's ``cli_checks`` run as the harness runs it: ``argv`` (the ``hermes``
    to check, with any prefix) and the check's ``args``, in a new work directory under
    ``root``; what fails it (an exit other than 0, each ``required_text`` missing from
    stdout and stderr together), or nothing."""
    import subprocess

    for name in ("home", "hermes-home", "work"):
        (root / name).mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [*argv, *check["args"]],
        cwd=root / "work",
        env=harness_env(root, closed_port()),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    text = done.stdout + done.stderr
    failures = [f"exited {done.returncode}: {text[-2000:]}"] if done.returncode != 0 else []
    return failures + [
        f"missing {required!r} in:\n{text}" for required in check["required_text"] if required not in text
    ]
