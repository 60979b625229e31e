"""The probe of a rendered operator plugin: a fixed script the installer and doctor run with
``python3 -I -c <this file's text> -- PLUGIN_DIR POLICY`` in the Python beside the target
Hermes, never through a Hermes subcommand. It imports nothing but the standard library and the
plugin, so it runs in a Python that has none of this project's packages.

It loads the plugin from its directory with a context that records what ``register`` asks for
(tools, hooks, skills), then calls each hook twice with payload-free keywords, in a
managed-looking session, under an audit hook that records what a hook must never do (start a
process, use the network, open a database). The first time a reporter of its own takes the
reports (a Unix socket in a scratch directory that answers the intake's ZMTP handshake and
reads what comes): how long the hooks take is measured then, as a turn meets them. The second
time that reporter is gone: every report fails, and no hook may raise (as the operator's own
probe judges it; the sender a Hermes without this project's packages uses fails at once).

The document holds names and counts only, never a payload; what the plugin prints goes to
stderr, so stdout holds the one JSON document. Whether the findings are good is the caller's
judgement (``hermes_cli.operator.registration``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import socket
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

SCHEMA = 1
PACKAGE = "hermes_plugins"
PLUGIN = "pohunek"
SESSION_ENV = "POHUNEK_SESSION_ID"
ENDPOINT_ENV = "POHUNEK_HOOK_ENDPOINT"
DRY_RUN_SESSION = "pohunek-probe-dry-run"
DRY_RUN_KWARGS: dict[str, dict[str, Any]] = {"on_session_start": {"resumed": False}}
# The intake's side of a ZMTP 3.0 NULL handshake: its greeting, then READY as a PULL socket.
GREETING = b"\xff" + b"\x00" * 8 + b"\x7f\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" * 32
_READY_BODY = b"\x05READY\x0bSocket-Type" + (4).to_bytes(4, "big") + b"PULL"
READY = b"\x04" + bytes([len(_READY_BODY)]) + _READY_BODY
FORBIDDEN = frozenset(
    {
        "subprocess.Popen",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "sqlite3.connect",
        "sqlite3.connect/handle",
        "socket.getaddrinfo",
    }
)
NETWORK = frozenset({socket.AF_INET, socket.AF_INET6})
SOCKET_USE = frozenset({"socket.connect", "socket.bind", "socket.sendto"})


class Intake:
    """A reporter that takes every report and keeps none, until ``close``; then every report
    to it fails (a Unix socket knows at once that its peer is gone)."""

    def __init__(self, path: Path) -> None:
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(8)
        self.server.settimeout(0.05)
        self.peers: list[socket.socket] = []
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.closing.is_set():
            try:
                peer, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.peers.append(peer)
            threading.Thread(target=self._drain, args=(peer,), daemon=True).start()

    def _drain(self, peer: socket.socket) -> None:
        try:
            peer.sendall(GREETING + READY)
            while peer.recv(65536):
                pass
        except OSError:
            pass

    def close(self) -> None:
        self.closing.set()
        self.thread.join(timeout=1.0)
        self.server.close()
        for peer in self.peers:
            with contextlib.suppress(OSError):
                peer.shutdown(socket.SHUT_RDWR)  # wakes its reader: a close alone would not
            peer.close()


class Recorder:
    """The context ``register`` gets: it keeps the names, in order, and nothing else."""

    def __init__(self) -> None:
        self.tools: list[str] = []
        self.hooks: list[tuple[str, Callable[..., Any]]] = []
        self.skills: list[str] = []

    def register_tool(self, name: str, *_args: Any, **_kwargs: Any) -> None:
        self.tools.append(name)

    def register_hook(self, name: str, callback: Callable[..., Any]) -> None:
        self.hooks.append((name, callback))

    def register_skill(self, name: str, *_args: Any, **_kwargs: Any) -> None:
        self.skills.append(name)


class Watch:
    """An audit hook that records forbidden events while ``recording`` (it cannot be removed)."""

    def __init__(self) -> None:
        self.recording = False
        self.seen: set[str] = set()
        sys.addaudithook(self._audit)

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.recording:
            return
        if event in FORBIDDEN:
            self.seen.add(event)
        elif event in SOCKET_USE and getattr(args[0], "family", None) in NETWORK:
            self.seen.add(event)
        elif event == "socket.__new__" and len(args) > 1 and args[1] in NETWORK:
            self.seen.add(event)


def _call(module: types.ModuleType | None, function: str) -> Any:
    """What ``module.function()`` answers; None when there is none or it raised."""
    call = getattr(module, function, None)
    if not callable(call):
        return None
    try:
        return call()
    except Exception:
        return None


def _load(plugin: Path) -> tuple[types.ModuleType | None, str | None]:
    if not (plugin / "plugin.yaml").is_file() or not (plugin / "__init__.py").is_file():
        return None, "manifest_invalid"
    parent = types.ModuleType(PACKAGE)
    parent.__path__ = []
    sys.modules[PACKAGE] = parent
    name = f"{PACKAGE}.{PLUGIN}"
    spec = importlib.util.spec_from_file_location(
        name, plugin / "__init__.py", submodule_search_locations=[str(plugin)]
    )
    if spec is None or spec.loader is None:
        return None, "import_failed"
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit):
        return None, "import_failed"
    return module, None


def _call_hooks(recorder: Recorder, escaped: set[str]) -> None:
    for name, callback in recorder.hooks:
        try:
            callback(session_id=DRY_RUN_SESSION, **DRY_RUN_KWARGS.get(name, {}))
        except (Exception, SystemExit):  # named, never its text
            escaped.add(name)


def _dry_run(recorder: Recorder, watch: Watch, intake: Intake) -> dict[str, Any]:
    escaped: set[str] = set()
    watch.recording = True
    try:
        started = time.monotonic()
        _call_hooks(recorder, escaped)  # the reporter takes the reports: a turn's cost
        elapsed = time.monotonic() - started
        intake.close()
        served = set(escaped)
        _call_hooks(recorder, escaped)  # the reporter is gone: every report fails
    finally:
        watch.recording = False
    return {
        "calls": len(recorder.hooks),
        "forbidden": sorted(watch.seen),
        "escaped": sorted(escaped),
        "forced_failure_swallowed": not escaped - served and not served,
        "latency_ms": math.ceil(elapsed * 1000),
    }


def probe(plugin: Path, policy: str, scratch: Path) -> dict[str, Any]:
    # The intake by a path relative to the scratch directory: short, however long TMPDIR is.
    os.chdir(scratch)
    intake = Intake(Path("r.in"))
    # Before the plugin is imported: its reports' client reads these once, when first used.
    os.environ[SESSION_ENV] = DRY_RUN_SESSION
    os.environ[ENDPOINT_ENV] = "ipc://r.in"
    watch = Watch()
    recorder = Recorder()
    module, error = _load(plugin)
    if module is not None:
        try:
            module.register(recorder)
        except (Exception, SystemExit):
            error = "register_failed"
    loaded = error is None
    status = _call(module, "integration_status") if loaded else None
    state = status.get("state") if isinstance(status, dict) else None
    idle = {"calls": 0, "forbidden": [], "escaped": [], "forced_failure_swallowed": False, "latency_ms": 0}
    try:
        dry_run = _dry_run(recorder, watch, intake) if loaded else idle
    finally:
        intake.close()
    return {
        "schema": SCHEMA,
        "loaded": loaded,
        "error": error,
        "state": state if isinstance(state, str) else None,
        "policy_bound": loaded and getattr(module, "POLICY_PATH", None) == policy,
        "tools": sorted(recorder.tools) if loaded else [],
        "skills": recorder.skills if loaded else [],
        "hooks": [name for name, _ in recorder.hooks] if loaded else [],
        "hook_dry_run": dry_run,
    }


def main() -> None:
    sys.dont_write_bytecode = True  # -I ignores PYTHONDONTWRITEBYTECODE: no __pycache__ in the plugin
    if len(sys.argv) != 4 or sys.argv[1] != "--":
        raise SystemExit("usage: python3 -I -c SCRIPT -- PLUGIN_DIR POLICY")
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)  # the plugin's prints go to stderr
    with tempfile.TemporaryDirectory(prefix="pohunek-probe-") as scratch:
        document = probe(Path(sys.argv[2]), sys.argv[3], Path(scratch))
    sys.stdout.flush()
    os.dup2(saved, 1)
    os.write(1, json.dumps(document, separators=(",", ":")).encode() + b"\n")


if __name__ == "__main__":
    main()
