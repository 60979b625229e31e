"""``hermes demo``: the mesh on a fresh demo install, updated live.

Builds a demo install (a git clone of this install's committed code, with an origin of its
own) under a demo directory, starts the embedded supervisor with three profiles' gateways as
a managed session reporting to an operator daemon simulator, sends each gateway a turn,
installs the operator plugin from a runtime package it builds and signs, and has a managed
chat make tool calls with it, signs in to Nous against a local portal simulator, pushes a new
commit to the demo origin and runs ``hermes update`` against it, then shows the fleet matrix
and where the receipt is. Every command runs the
DEMO install's code, exactly as an operator's would. Everything the demo started is stopped
again (and its directory removed) unless ``--keep``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hermes_cli import output
from hermes_cli.commands import demo_integration, demo_operator, demo_signin
from hermes_cli.errors import DemoFailed
from shared.identity import ProcessIdentity
from shared.process_signals import signal_identified
from shared.version import INSTALL_ROOT, code_sha

PROFILES = ("coder", "writer", "research")
STEP_TIMEOUT = 300
UPDATE_STOP_TIMEOUT = 60.0  # how long an interrupted demo waits for its update to stop


class DemoInstall:
    """A clone of this install with its own origin, and a home for its profiles."""

    def __init__(self, base: Path):
        self.base = base
        self.origin = base / "origin.git"
        self.path = base / "install"
        self.dev = base / "dev"
        self.home = base / "home"
        self.extra_env: dict[str, str] = {}

    def build(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        self.git(self.base, "clone", "-q", "--bare", str(INSTALL_ROOT), str(self.origin))
        self.git(self.base, "clone", "-q", str(self.origin), str(self.path))
        self.git(self.base, "clone", "-q", str(self.origin), str(self.dev))
        self.home.mkdir(exist_ok=True)

    def env(self) -> dict[str, str]:
        env = dict(os.environ, HERMES_HOME=str(self.home), **self.extra_env)
        env["PYTHONPATH"] = str(self.path)  # the demo install's code, not this one's
        return env

    def git(self, cwd: Path, *args: str) -> str:
        done = subprocess.run(
            ["git", "-c", "user.name=hermes demo", "-c", "user.email=demo@hermes.invalid", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT,
        )
        if done.returncode != 0:
            raise DemoFailed(f"git {args[0]} failed: {done.stderr.strip()[-400:]}")
        return done.stdout.strip()

    def hermes(self, *args: str, show: bool) -> subprocess.CompletedProcess:
        """Run the demo install's ``hermes``; its progress goes to our stderr when ``show``."""
        return subprocess.run(
            [sys.executable, "-m", "hermes_cli.main", *args],
            cwd=self.path,
            env=self.env(),
            stdout=subprocess.PIPE,
            text=True,
            timeout=STEP_TIMEOUT,
            stderr=None if show else subprocess.PIPE,
        )

    def release(self) -> str:
        notes = self.dev / "RELEASE_NOTES.md"
        notes.write_text("# Demo release\n\nPushed by `hermes demo` to show a live fleet update.\n")
        self.git(self.dev, "add", notes.name)
        self.git(self.dev, "commit", "-qm", "Demo release")
        self.git(self.dev, "push", "-q", "origin", "HEAD")
        return self.git(self.dev, "rev-parse", "HEAD")


def cmd_demo(args) -> int:
    if code_sha() is None:
        raise DemoFailed(f"the demo clones this install, and {INSTALL_ROOT} is not a git checkout")
    created = args.home is None
    base = Path(args.home).absolute() if args.home else Path(tempfile.mkdtemp(prefix="hermes-demo-"))
    demo = DemoInstall(base)
    show = not output.wants_json(args)
    say = (lambda message: print(f"\n» {message}", file=sys.stderr, flush=True)) if show else (lambda message: None)
    data: dict[str, Any] = {"home": str(demo.home), "install": str(demo.path), "profiles": list(PROFILES)}
    portal: demo_signin.PortalSimulator | None = None
    daemon: demo_operator.OperatorDaemon | None = None
    try:
        say(f"building a demo install in {base} (a clone of {INSTALL_ROOT} with its own origin)")
        demo.build()
        for name in PROFILES:
            _check(demo.hermes("profile", "create", name, show=False), "create a profile")
        say("starting an operator daemon simulator: the mesh runs as a managed session and reports to it")
        # The chats it starts run in the coder profile, where the operator plugin goes.
        coder = {"HERMES_HOME": str(demo.home / "profiles" / demo_integration.PROFILE)}
        state = demo_integration.state_env(base)
        address = f"ipc://{base / 'daemon.ctl'}"
        daemon = demo_operator.OperatorDaemon(
            demo.path, {**demo.env(), **coder}, address, Path(state["POHUNEK_STATE_DIR"])
        )
        demo.extra_env = {**daemon.env(), **state}
        say(f"starting the mesh: supervisord and {len(PROFILES)} gateways forked from one gateway host")
        _check(demo.hermes("mesh", "up", "--profiles", ",".join(PROFILES), show=show), "start the mesh")
        data["turns"] = _send_turns(demo)
        for turn in data["turns"]:
            say(f"turn {turn['turn_id']} on {turn['profile']}: {turn['text']!r}")
        data["operator_reports"] = _wait_for_reports(daemon, len(PROFILES))
        say(f"the operator daemon received: {data['operator_reports']}")
        say("the operator integration: build and sign the Hermes runtime package, install it, then the plugin")
        data["integration"] = demo_integration.install(demo.path, base, demo.env(), say)
        data["integration"]["tool_calls"] = demo_integration.tool_calls(daemon.address, say)
        say("starting a Nous portal simulator, then: hermes auth login nous")
        portal = demo_signin.PortalSimulator(demo.path, demo.env(), base / "portal.json")
        data["sign_in"] = demo_signin.sign_in(demo.path, demo.env(), portal, say)
        say(data["sign_in"]["copy_terminal"])
        data["before"] = _fleet(demo)
        say("pushing a new commit to the demo origin, then: hermes update --yes")
        data["released"] = demo.release()
        update = demo.hermes("update", "--yes", show=show)  # its progress shows as an operator sees it
        report = _json(demo.hermes("logs", "update", "--json", show=False), "logs update")
        report = {**report, "receipt": _receipt_path(demo, report)}
        data["update"] = report
        data["receipt"] = report.get("receipt")
        data["exit_code"] = update.returncode
    finally:
        with _uninterrupted():
            if portal is not None:
                portal.stop()
            if daemon is not None:
                daemon.stop()
            data["kept"] = bool(args.keep)
            if not args.keep and demo.path.exists():
                say("stopping everything the demo started")
                _stop_update(demo.home)
                demo.hermes("mesh", "down", show=False)
                if created:
                    data["receipt"] = _carry_out(data.get("receipt"))
                    shutil.rmtree(base, ignore_errors=True)
    output.emit(args, data, _text)
    return int(data["exit_code"])


@contextmanager
def _uninterrupted() -> Iterator[None]:
    """The clean-up runs to its end: a Ctrl-C or SIGTERM that comes meanwhile (the demo is
    stopping already) would leave the mesh it is bringing down half up."""
    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {signum: signal.signal(signum, lambda signum, frame: None) for signum in stops}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _stop_update(home: Path) -> None:
    """Stop an update the demo was interrupted in: it runs detached, and would restart the
    gateways and workers after the mesh went down. SIGINT is the stop it records as interrupted."""
    from services.updater import holder

    running = holder(home)
    try:
        ident = ProcessIdentity.from_dict(running or {})
    except ValueError:  # nothing holds it, or its holder's identity is not readable
        return
    if not signal_identified(ident, signal.SIGINT):
        return
    deadline = time.monotonic() + UPDATE_STOP_TIMEOUT
    while holder(home) is not None and time.monotonic() < deadline:  # its completion shares the lock
        time.sleep(0.1)


def _carry_out(receipt: str | None) -> str | None:
    """A copy of the receipt beside the removed demo directory, so the path shown still opens."""
    if receipt is None or not Path(receipt).is_file():
        return None
    kept = Path(tempfile.gettempdir()) / f"hermes-demo-{Path(receipt).name}"
    shutil.copyfile(receipt, kept)
    return str(kept)


def _receipt_path(demo: DemoInstall, receipt: dict[str, Any]) -> str | None:
    found = sorted((demo.home / "logs" / "update_receipts").glob(f"update_*_{receipt.get('update_id')}.json"))
    return str(found[-1]) if found else None


def _send_turns(demo: DemoInstall) -> list[dict[str, Any]]:
    from shared import homes
    from shared.gateways import ops
    from shared.transport import SyncClient

    turns = []
    for name in PROFILES:
        endpoint = homes.endpoint(homes.profile_home(name, demo.home), ops.SERVICE, create=False)
        with SyncClient(endpoint.control) as client:
            answer = client.call(ops.TURN, {"text": f"hello from {name}", "seconds": 0.2}, timeout=10)
        turns.append({"profile": name, **answer})
    return turns


def _wait_for_reports(daemon: demo_operator.OperatorDaemon, gateways: int) -> dict[str, int]:
    """The daemon's tally once every gateway's turn reported working and idle (bounded)."""
    deadline = time.monotonic() + 30
    while True:
        summary = daemon.summary()
        done = summary.get("activity:working", 0) >= gateways and summary.get("activity:idle", 0) >= gateways
        if done or time.monotonic() > deadline:
            return summary
        time.sleep(0.1)


def _fleet(demo: DemoInstall) -> list[dict[str, Any]]:
    return _json(demo.hermes("gateway", "status", "--json", show=False), "gateway status")["gateways"]


def _check(done: subprocess.CompletedProcess, what: str) -> None:
    if done.returncode != 0:
        raise DemoFailed(f"could not {what} (exit {done.returncode}): {(done.stderr or done.stdout or '')[-600:]}")


def _json(done: subprocess.CompletedProcess, what: str) -> dict[str, Any]:
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        raise DemoFailed(f"{what} did not answer with JSON (exit {done.returncode}): {done.stdout[-600:]}") from None


def _text(d: dict[str, Any]) -> str:
    update = d["update"]
    lines = ["", "before the update:"]
    rows = [(g["profile"], g["pid"], g["state"], (g["code_sha"] or "")[:12], g["supervisor"]) for g in d["before"]]
    lines.append(output.table(("PROFILE", "PID", "STATE", "CODE", "SUPERVISOR"), rows))
    lines += ["", f"after `hermes update` to {d['released'][:12]}:"]
    fleet = [
        (r["profile"], r["supervisor"] or "-", r["pid"] or "-", r["state"], (r["running"] or "-")[:12], r["verdict"])
        for r in update.get("fleet") or []
    ]
    lines.append(output.table(("PROFILE", "SUPERVISOR", "PID", "STATE", "RUNNING", "VERDICT"), fleet))
    lines += ["", f"update {update.get('update_id')}: {update.get('outcome')}; receipt: {d['receipt']}"]
    sign_in = d["sign_in"]
    lines.append(f"Nous sign-in: {sign_in['state']} as {sign_in.get('email')} ({sign_in.get('tier')} tier)")
    lines.append(f"operator daemon reports: {d['operator_reports']}")
    integration = d["integration"]
    calls = ", ".join(f"{c['tool']} {'ok' if c['ok'] else c['code']}" for c in integration["tool_calls"])
    digest = integration["package"]["digest"]
    lines.append(f"operator plugin: {demo_integration.PROFILE} profile from {digest[:19]}…; tool calls: {calls}")
    if not d["kept"]:
        lines.append("(the demo directory is removed again; `hermes demo --keep` leaves it and the mesh running)")
    if d["kept"]:
        lines.append(f"still running; stop it with: HERMES_HOME={d['home']} hermes mesh down")
    return "\n".join(lines)
