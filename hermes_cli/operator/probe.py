"""``hermes operator probe``: load a rendered operator plugin in this (fresh) process and dry-run
its hooks, for the installer and doctor, who run it as a subprocess of the target Hermes.

The plugin is loaded from its directory through the real plugin host (``PluginHost.load_dir``),
so it registers exactly as a chat would see it. Then each registered hook is called once with
payload-free keywords, under an audit hook that records what a hook must never do (start a
process, use the network, open a database), in a managed-looking session whose reporter
cannot be reached: every report fails, at once, and the hooks must swallow it and count it.

The endpoint is forced to fail *synchronously*: an ipc path longer than a Unix socket address
can be, in a fresh empty directory, makes zmq's connect fail (``ENAMETOOLONG``), a report
counted as an ``error``. A plain path nothing listens on would not do: its send is only "not
accepted", which the native-id claim retries for about a second. The session id and endpoint
given replace whatever the caller's environment had, so a dry run never reaches a real reporter.

The document holds names and counts only, never a payload; what the plugin writes to stdout
while it loads and runs goes to stderr, so stdout holds the one document. Whether the findings
are good is the caller's judgement (``hermes_cli.operator.registration``).
"""

from __future__ import annotations

import math
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from shared import hooks as reports
from shared.errors import HermesError
from shared.plugin_host import PACKAGE, PluginHost, PluginInfo, PluginNotFound

SCHEMA = 1
PLUGIN = "pohunek"
DRY_RUN_SESSION = "pohunek-probe-dry-run"
# Hermes's hooks get the session id; nothing else, so nothing a user typed exists to leak.
DRY_RUN_KWARGS: dict[str, dict[str, Any]] = {"on_session_start": {"resumed": False}}
# Longer than any Unix socket address (108 bytes on Linux, 104 on macOS), and one path
# component (NAME_MAX is 255): the connect fails whatever the directory.
UNREACHABLE_NAME = "r" * 200 + ".in"
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


class ProbeCouldNotRun(HermesError):
    """The probe itself could not run (no plugin there, no temporary directory); exit 1."""

    code = "plugin_probe_not_run"


def unreachable_endpoint(directory: Path) -> str:
    """An ipc address in ``directory`` that a connect refuses at once."""
    return f"ipc://{Path(directory).resolve() / UNREACHABLE_NAME}"


class _Watch:
    """An audit hook that records forbidden events while ``recording``. An audit hook cannot
    be removed, so it stays installed and idle for the rest of the process."""

    def __init__(self) -> None:
        self.recording = False
        self.seen: set[str] = set()
        sys.addaudithook(self._audit)

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.recording:
            return
        # zmq's sockets are made in C and raise no event: only Python-level work is seen.
        if event in FORBIDDEN:
            self.seen.add(event)
        elif event in SOCKET_USE and getattr(args[0], "family", None) in NETWORK:
            self.seen.add(event)
        elif event == "socket.__new__" and len(args) > 1 and args[1] in NETWORK:
            self.seen.add(event)


@contextmanager
def _stdout_aside() -> Iterator[None]:
    """Plugin code's writes to stdout (fd 1, ``print`` or ``os.write``) go to stderr meanwhile."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
    except OSError:  # no stderr: nowhere but nothing
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _plugin_call(module: str, function: str) -> Any:
    """What ``<plugin>.<module>.<function>()`` answers, or None when there is no such function
    or it raised (plugin code is judged by the document, never trusted to behave)."""
    name = f"{PACKAGE}.{PLUGIN}" + (f".{module}" if module else "")
    call = getattr(sys.modules.get(name), function, None)
    if not callable(call):
        return None
    try:
        return call()
    except Exception:
        return None


def _state() -> str | None:
    status = _plugin_call("", "integration_status")
    state = status.get("state") if isinstance(status, dict) else None
    return state if isinstance(state, str) else None


def _hook_failures() -> int | None:
    counts = _plugin_call("hooks", "counters")
    failures = counts.get("failures") if isinstance(counts, dict) else None
    return failures if type(failures) is int else None


def _in_order(host: PluginHost, info: PluginInfo) -> list[tuple[str, Callable[..., Any]]]:
    """Every registered callback with its hook's name, in registration order."""
    pending = {name: iter(callbacks) for name, callbacks in host.hooks.items()}
    return [(name, next(pending[name])) for name in info.hooks]


def _dry_run(host: PluginHost, info: PluginInfo, watch: _Watch) -> dict[str, Any]:
    calls = _in_order(host, info)
    failures_before, sent_before = _hook_failures(), reports.counters()["sent"]
    escaped: list[str] = []
    watch.recording = True
    started = time.monotonic()
    try:
        for name, callback in calls:
            try:
                callback(session_id=DRY_RUN_SESSION, **DRY_RUN_KWARGS.get(name, {}))
            except (Exception, SystemExit):  # named, never its text
                escaped.append(name)
    finally:
        elapsed = time.monotonic() - started
        watch.recording = False
    failures_after = _hook_failures()
    grew = failures_before is not None and failures_after is not None and failures_after > failures_before
    return {
        "calls": len(calls),
        "forbidden": sorted(watch.seen),
        "escaped": escaped,
        "forced_failure_swallowed": grew and not escaped and reports.counters()["sent"] == sent_before,
        "latency_ms": math.ceil(elapsed * 1000),
    }


def probe(plugin_dir: Path) -> dict[str, Any]:
    """Load the plugin in ``plugin_dir`` and dry-run its hooks; the document of what was found.
    Meant for a fresh process: the environment's session and endpoint are replaced for good."""
    try:
        scratch = Path(tempfile.mkdtemp(prefix="pohunek-probe-"))
    except OSError:
        raise ProbeCouldNotRun("no temporary directory for the dry run") from None
    # Before the plugin is imported: the reports' client reads these once, when first used.
    os.environ[reports.SESSION_ENV] = DRY_RUN_SESSION
    os.environ[reports.ENDPOINT_ENV] = unreachable_endpoint(scratch)
    try:
        watch = _Watch()
        with _stdout_aside():
            try:
                host = PluginHost.load_dir(plugin_dir, PLUGIN)
            except PluginNotFound:
                raise ProbeCouldNotRun("the plugin directory holds no plugin") from None
            (info,) = host.plugins
            state = _state()
            dry_run = (
                _dry_run(host, info, watch)
                if info.loaded
                else {"calls": 0, "forbidden": [], "escaped": [], "forced_failure_swallowed": False, "latency_ms": 0}
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "schema": SCHEMA,
        "loaded": info.loaded,
        "error": info.error,
        "state": state,
        "tools": sorted(info.tools),
        "skills": list(info.skills),
        "hooks": list(info.hooks),
        "hook_dry_run": dry_run,
    }
