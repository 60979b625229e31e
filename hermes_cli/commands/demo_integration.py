"""The demo's operator integration stage: the Hermes runtime package built and signed as a
release would (with a key made for this demo, never a shipped one), installed into the
registry, the operator plugin installed into the coder profile, then a chat the session daemon
manages makes three typed tool calls on a peer session.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_cli.errors import DemoFailed

PROFILE = "coder"
STEP_TIMEOUT = 120
CHAT_TIMEOUT = 60.0
RESULT = re.compile(rb"tool-result (\S+) (\{.*?\})\r\n")


def state_env(base: Path) -> dict[str, str]:
    """Where the demo's integration state and trust anchor live."""
    return {"POHUNEK_STATE_DIR": str(base / "pohunek-state"), "POHUNEK_TRUST_ANCHOR": str(base / "anchor.json")}


def _run(argv: list[str], cwd: Path, env: dict[str, str], what: str) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT)
    if done.returncode != 0:
        raise DemoFailed(f"could not {what} (exit {done.returncode}): {(done.stderr or done.stdout)[-600:]}")
    return done.stdout


def install(install_dir: Path, base: Path, env: dict[str, str], say: Callable[[str], None]) -> dict[str, Any]:
    """Build, sign, install the package, then the plugin into the coder profile; the receipts."""
    python = sys.executable
    archive, key, catalog = base / "hermes.tar.zst", base / "demo-signing.key", base / "runtime-catalog.json"
    digest = _run(
        [python, "scripts/build_runtime_package.py", "runtime-packages/hermes", "-o", str(archive)],
        install_dir,
        env,
        "build the runtime package",
    ).strip()
    say(f"built runtime-packages/hermes into {archive.name}: {digest}")
    anchor = state_env(base)["POHUNEK_TRUST_ANCHOR"]
    _run(
        [python, "scripts/sign_catalog.py", "keygen", "--out", str(key), "--anchor", anchor],
        install_dir,
        env,
        "make a key",
    )
    entry = f"{archive}:pohunek.runtime.hermes:hermes:1.0.0"
    _run(
        [
            python,
            "scripts/sign_catalog.py",
            "sign",
            "--key",
            str(key),
            "--sequence",
            "1",
            "--entry",
            entry,
            "-o",
            str(catalog),
        ],
        install_dir,
        env,
        "sign the catalog",
    )
    say("signed a catalog entry for it with a key made for this demo")
    hermes = [python, "-m", "hermes_cli.main"]
    package = json.loads(
        _run(
            [*hermes, "operator", "package", "install", str(archive), "--catalog", str(catalog), "--json"],
            install_dir,
            env,
            "install the package",
        )
    )
    say(f"hermes operator package install: {package['package_id']} {package['version']} selected")
    flags = ["--hermes-profile", PROFILE, "--access-mode", "manage", "--allow-host", "local", "--json"]
    result = json.loads(_run([*hermes, "operator", "install", *flags], install_dir, env, "install the operator plugin"))
    say(f"hermes operator install --hermes-profile {PROFILE} --access-mode manage --allow-host local: installed")
    return {"package": package, "install": {k: result[k] for k in ("installed", "enabled", "provenance", "outdated")}}


def tool_calls(address: str, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """A managed ``hermes chat`` (the coder profile, its plugin enabled) makes three tool calls
    on a peer session; each call's name and whether it answered ok."""
    from shared.operator import protocol as p
    from shared.operator.client import DaemonClient

    with DaemonClient(address) as daemon:
        new = {"host": "local", "cols": 160, "rows": 40}
        daemon.call(p.SESSION_NEW, {**new, "agent": "shell", "name": "peer"}, timeout=30)
        origin = daemon.call(p.SESSION_NEW, {**new, "agent": "hermes", "name": "operator"}, timeout=30)
        chat = _Terminal(daemon, origin["id"], origin["runtime"])
        calls = [
            ("pohunek_session_get", {"session": "peer"}),
            ("pohunek_session_send", {"session": "peer", "input": "echo hello from the operator plugin"}),
            ("pohunek_session_screen", {"session": "peer"}),
        ]
        results = []
        for name, args in calls:
            answer = chat.tool(name, args)
            results.append(
                {"tool": name, "ok": bool(answer.get("ok")), "code": (answer.get("error") or {}).get("code")}
            )
            say(f"tool call {name}: {'ok' if answer.get('ok') else answer.get('error', {}).get('code')}")
        chat.type("/exit")
    return results


class _Terminal:
    """The chat's screen bytes, read by cursor, with bounded waits."""

    def __init__(self, daemon: Any, session: str, runtime: dict[str, Any]) -> None:
        self.daemon, self.session, self.offset, self.seen = daemon, session, "0", b""
        # The offset counts in this runtime: the daemon takes a cursor only with it.
        self.runtime = {k: runtime[k] for k in ("worker_instance_id", "runtime_generation")}

    def type(self, line: str) -> None:
        from shared.operator import protocol as p

        self.daemon.call(p.SESSION_INPUT, {"host": "local", "session": self.session, "text": line}, timeout=10)

    def tool(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        from shared.operator import protocol as p

        self.type(f"/tool {name} {json.dumps(args)}")
        deadline = time.monotonic() + CHAT_TIMEOUT
        while time.monotonic() < deadline:
            for found in RESULT.finditer(self.seen):
                if found.group(1).decode() == name:
                    self.seen = self.seen[found.end() :]
                    return json.loads(found.group(2))
            page = self.daemon.call(
                p.SESSION_OUTPUT,
                {
                    "host": "local",
                    "session": self.session,
                    **self.runtime,
                    "after_offset": self.offset,
                    "wait_ms": 1500,
                },
                timeout=10,
            )
            self.offset, self.seen = page["next_offset"], self.seen + page["data"]
        raise DemoFailed(f"the managed chat never answered {name}")
