"""``hermes demo``: the mesh on a fresh demo home, working.

Creates three profiles, starts the embedded supervisor with one gateway each, sends every
gateway a turn, and shows the gateway table. Everything it started is stopped again (and a
home it created removed) unless ``--keep``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from hermes_cli import output
from hermes_cli.commands.mesh import StartProgress

PROFILES = ("coder", "writer", "research")


def _progress(args, message: str) -> None:
    if not output.wants_json(args):
        print(f"… {message}", file=sys.stderr, flush=True)


def cmd_demo(args) -> int:
    from services.gateway import fleet, ops
    from shared import homes
    from shared.supervisors import supervisord
    from shared.sync_client import SyncClient

    created = args.home is None
    root = Path(args.home).absolute() if args.home else Path(tempfile.mkdtemp(prefix="hermes-demo-")) / "home"
    os.environ[homes.HOME_ENV] = str(root)  # the demo's processes and every command below use it
    data: dict[str, Any] = {"home": str(root), "profiles": list(PROFILES), "kept": bool(args.keep)}
    try:
        for name in PROFILES:
            home = homes.profile_home(name, root)
            home.mkdir(parents=True, exist_ok=True)
            homes.ensure_run_dir(home)
        _progress(args, f"starting the mesh in {root} (supervisord and {len(PROFILES)} gateways)")
        progress = None if output.wants_json(args) else StartProgress()
        try:
            supervisord.up(root, list(PROFILES), progress=progress)
        finally:
            if progress is not None:
                progress.close()
        turns = []
        for name in PROFILES:
            _progress(args, f"sending a turn to {name}")
            endpoint = homes.endpoint(homes.profile_home(name, root), ops.SERVICE)
            with SyncClient(endpoint.control) as client:
                answer = client.call(ops.TURN, {"text": f"hello from {name}", "seconds": 0.2}, timeout=10)
            turns.append({"profile": name, **answer})
        data["turns"] = turns
        data["gateways"] = [record.to_dict() for record in fleet.discover(root)]
    finally:
        if not args.keep:
            _progress(args, "stopping everything the demo started")
            supervisord.down(root)
            if created:
                shutil.rmtree(root.parent, ignore_errors=True)

    def text(d: dict[str, Any]) -> str:
        rows = [
            (g["profile"], g["pid"], g["state"], (g["code_sha"] or "")[:12], g["code_version"], g["supervisor"], g["source"])
            for g in d["gateways"]
        ]
        lines = [f"demo home: {d['home']}", ""]
        lines += [f"turn {t['turn_id']} on {t['profile']}: {t['text']!r}" for t in d["turns"]]
        lines += ["", output.table(("PROFILE", "PID", "STATE", "CODE", "VERSION", "SUPERVISOR", "SOURCE"), rows)]
        if d["kept"]:
            lines += ["", f"still running; stop it with: HERMES_HOME={d['home']} hermes mesh down"]
        return "\n".join(lines)

    output.emit(args, data, text)
    return 0
