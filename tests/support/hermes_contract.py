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
