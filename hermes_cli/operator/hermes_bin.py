"""The target Hermes, driven as the operator's installer drives it: four fixed commands and the
probe, each a bounded child process, nothing else.

The commands are ``--version`` (through the package's version probe, the launch gate's
grammar), ``plugins list --json``, ``plugins enable pohunek --no-allow-tool-override`` and
``plugins disable pohunek``; a switch counts only when the list that follows it says so. Each
child runs from ``/`` in its own session with an environment of exactly ``NO_COLOR=1 TERM=dumb
LANG=C PYTHONDONTWRITEBYTECODE=1 HERMES_HOME=<target home>``, for at most ``COMMAND_TIMEOUT``
seconds and ``OUTPUT_CAP`` bytes on each stream; past either its whole group is killed. What a
child printed never reaches an error. Hermes YAML is never edited here.

``--hermes-bin`` is judged as the operator judges it: absolute, no symlink on the way, a regular
file of yours, executable, written by no one else (nor any directory above it). The probe runs
in the Python beside it (``<dir>/python3``, a file of root's or yours that no one else writes).
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hermes_cli.operator.errors import IntegrationError
from runtime_package.manifests import VersionRange
from shared.operator import version_probe

COMMAND_TIMEOUT = 20.0  # a cold Hermes start on a shared runner takes seconds
OUTPUT_CAP = 64 * 1024  # per stream; a real plugin list is about 27 KiB
KILL_WAIT = 5.0
PLUGIN = "pohunek"
LIST = ("plugins", "list", "--json")
ENABLE = ("plugins", "enable", PLUGIN, "--no-allow-tool-override")
DISABLE = ("plugins", "disable", PLUGIN)
ENABLED, DISABLED, NOT_ENABLED = "enabled", "disabled", "not enabled"
STATES = frozenset({ENABLED, DISABLED, NOT_ENABLED})
FLAG = "--hermes-bin"
_UNSAFE_WRITE = 0o022


class HermesUnusable(IntegrationError):
    code = "hermes_command_failed"

    def __init__(self, code: str, message: str, *, detail: dict[str, Any] | None = None) -> None:
        super().__init__(message, detail=detail)
        self.code = code


def default_bin() -> str:
    """The ``hermes`` beside this interpreter (this install's), else the first on PATH."""
    beside = Path(sys.executable).parent / "hermes"
    if os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("hermes") or str(beside)


def _refuse_bin(reason: str, message: str) -> HermesUnusable:
    return HermesUnusable("hermes_not_executable", f"{FLAG}: {message}", detail={"flag": FLAG, "reason": reason})


def _safe_ancestors(path: str) -> bool:
    """Every directory above ``path`` is root's or yours, and written by no one else (a
    root-owned sticky directory such as /tmp excepted)."""
    root_uid = os.stat("/").st_uid
    for directory in Path(path).parents:
        info = os.stat(directory)
        sticky_shared = info.st_uid == root_uid and info.st_mode & stat.S_ISVTX
        if info.st_uid not in (root_uid, os.geteuid()) or (info.st_mode & _UNSAFE_WRITE and not sticky_shared):
            return False
    return True


def check_bin(path: str) -> str:
    """``path`` when it is a Hermes executable the installer may run; ``hermes_not_executable``
    naming the flag and the reason otherwise."""
    if not os.path.isabs(path) or "\x00" in path:
        raise _refuse_bin("relative", "the Hermes executable must be an absolute path")
    here = Path("/")
    try:
        for part in Path(path).parts[1:]:
            here = here / part
            if stat.S_ISLNK(os.lstat(here).st_mode):
                raise _refuse_bin("symlink", f"{here} is a symlink: give the real path")
        if os.path.realpath(path) != path:
            raise _refuse_bin("not_canonical", "give the canonical path of the Hermes executable")
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode) or not os.access(path, os.X_OK):
            raise _refuse_bin("not_executable", "the Hermes executable is missing or not executable")
        if info.st_uid != os.geteuid():
            raise _refuse_bin("owner", "the Hermes executable belongs to another user")
        if info.st_mode & _UNSAFE_WRITE or not _safe_ancestors(path):
            raise _refuse_bin("writable", "the Hermes executable or a directory above it is writable by others")
    except OSError:
        raise _refuse_bin("missing", "the Hermes executable is missing") from None
    return path


def sibling_python(path: str) -> str:
    """The Python beside the Hermes executable, which the probe runs in: a venv's link to its
    interpreter is followed, and the interpreter must be root's or yours and written by no
    one else. Run through the sibling path, so its environment is the one Hermes has."""
    requested = os.path.join(os.path.dirname(path), "python3")
    real = os.path.realpath(requested)
    try:
        info = os.stat(real)
        safe = (
            stat.S_ISREG(info.st_mode)
            and info.st_uid in (os.stat("/").st_uid, os.geteuid())
            and not info.st_mode & _UNSAFE_WRITE
            and os.access(real, os.X_OK)
            and _safe_ancestors(real)
        )
    except OSError:
        safe = False
    if not safe:
        raise HermesUnusable(
            "hermes_runtime_invalid",
            "the Python beside the Hermes executable is missing or unsafe: the probe runs in it",
            detail={"flag": FLAG, "path": requested},
        )
    return requested


def child_env(home: Path | None) -> dict[str, str]:
    """The whole environment of a child: nothing of this process's."""
    env = {"NO_COLOR": "1", "TERM": "dumb", "LANG": "C", "PYTHONDONTWRITEBYTECODE": "1"}
    if home is not None:
        env["HERMES_HOME"] = str(home)
    return env


def _kill(process: subprocess.Popen[bytes]) -> None:
    """Kill the child's whole group; only before it is reaped, while its pid is still its own."""
    try:
        os.killpg(process.pid, signal.SIGKILL)  # its own session: the group is its pid
    except (ProcessLookupError, PermissionError):
        pass
    try:
        process.wait(timeout=KILL_WAIT)
    except subprocess.TimeoutExpired:
        pass  # stuck in the kernel: nothing more to do


def _exited(process: subprocess.Popen[bytes], deadline: float) -> bool:
    """Whether the child exited by the deadline; it stays unreaped, so its group id is not reused."""
    while True:
        if os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


def run(argv: Sequence[str], env: dict[str, str], *, what: str, timeout: float = COMMAND_TIMEOUT) -> bytes:
    """The stdout of ``argv`` run to exit 0; ``HermesUnusable`` (``hermes_timeout``,
    ``hermes_output_limit``, ``hermes_command_failed``) with ``detail.command`` otherwise."""
    detail = {"command": what}
    deadline = time.monotonic() + timeout
    try:
        process = subprocess.Popen(
            list(argv),
            cwd="/",
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError:
        raise HermesUnusable("hermes_command_failed", f"{what} could not be started", detail=detail) from None
    try:
        out = _drain(process, deadline, what, detail)
        if not _exited(process, deadline):
            raise HermesUnusable("hermes_timeout", f"{what} did not finish in time", detail=detail)
    except BaseException:
        _kill(process)
        raise
    finally:
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
    _kill(process)  # what it left running in its group goes with it; this also reaps it
    if process.returncode != 0:
        raise HermesUnusable(
            "hermes_command_failed",
            f"{what} failed (exit {process.returncode})",
            detail={**detail, "exit": process.returncode},
        )
    return out


def _drain(process: subprocess.Popen[bytes], deadline: float, what: str, detail: dict[str, Any]) -> bytes:
    """Both pipes read to their end, each up to ``OUTPUT_CAP``; stdout's bytes."""
    kept: dict[int, list[bytes]] = {}
    sizes: dict[int, int] = {}
    with selectors.DefaultSelector() as selector:
        for stream in (process.stdout, process.stderr):
            assert stream is not None
            selector.register(stream, selectors.EVENT_READ)
            kept[stream.fileno()], sizes[stream.fileno()] = [], 0
        while selector.get_map():
            left = deadline - time.monotonic()
            ready = selector.select(left) if left > 0 else []
            if not ready:
                raise HermesUnusable("hermes_timeout", f"{what} did not finish in time", detail=detail)
            for key, _ in ready:
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                sizes[key.fd] += len(chunk)
                if sizes[key.fd] > OUTPUT_CAP:
                    raise HermesUnusable(
                        "hermes_output_limit", f"{what} printed more than {OUTPUT_CAP} bytes", detail=detail
                    )
                kept[key.fd].append(chunk)
    assert process.stdout is not None
    return b"".join(kept[process.stdout.fileno()])


def version(path: str, probe: VersionRange, home: Path) -> dict[str, Any]:
    """``{bin, version, accepted}`` when the probe reads a release in the package's range;
    ``HermesUnusable`` otherwise."""
    check_bin(path)
    try:
        out = run([path, *probe.args], child_env(home), what="hermes --version")
    except HermesUnusable as exc:
        if exc.code == "hermes_output_limit":
            raise HermesUnusable("hermes_version_unreadable", "hermes --version printed too much") from None
        raise HermesUnusable("hermes_version_unreadable", f"hermes --version: {exc.message}") from None
    try:
        found = version_probe.parse_version(out.decode("utf-8", "replace"))
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


def _invalid_state(reason: str) -> HermesUnusable:
    return HermesUnusable(
        "hermes_plugin_state_invalid",
        f"hermes plugins list does not report one {PLUGIN} plugin as expected ({reason})",
        detail={"reason": reason},
    )


def parse_plugin_state(raw: bytes) -> str:
    """The state ``plugins list --json`` reports for the managed plugin: one JSON array of
    ``{name, status, source}`` records (other fields free), nothing after it, exactly one named
    ``pohunek`` whose source is ``user`` and whose status is one of ``STATES``."""
    try:
        text = raw.decode("utf-8")
        records, end = json.JSONDecoder().raw_decode(text, len(text) - len(text.lstrip()))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _invalid_state("not_json") from None
    if text[end:].strip():
        raise _invalid_state("trailing_data")
    if not isinstance(records, list):
        raise _invalid_state("not_a_list")
    for record in records:
        if not isinstance(record, dict) or not all(
            isinstance(record.get(k), str) for k in ("name", "status", "source")
        ):
            raise _invalid_state("record_invalid")
    ours = [record for record in records if record["name"] == PLUGIN]
    if len(ours) != 1:
        raise _invalid_state("missing" if not ours else "duplicate")
    if ours[0]["source"] != "user":
        raise _invalid_state("source")
    if ours[0]["status"] not in STATES:
        raise _invalid_state("status")
    return str(ours[0]["status"])


def plugin_state(path: str, home: Path) -> str:
    return parse_plugin_state(run([path, *LIST], child_env(home), what="hermes plugins list"))


def switch_command(path: str, home: Path, enabled: bool) -> None:
    """``hermes plugins enable|disable pohunek``, taken at its exit code alone."""
    argv = ENABLE if enabled else DISABLE
    run([path, *argv], child_env(home), what=f"hermes plugins {argv[1]}")


def switch_plugin(path: str, home: Path, enabled: bool) -> None:
    """The switch, then the list must say ``enabled`` (or ``disabled``); ``HermesUnusable``
    otherwise."""
    switch_command(path, home, enabled)
    found, wanted = plugin_state(path, home), ENABLED if enabled else DISABLED
    if found != wanted:
        verb = "enable" if enabled else "disable"
        raise HermesUnusable(
            "plugin_switch_failed",
            f"hermes plugins {verb} {PLUGIN} left it {found}",
            detail={"verb": verb, "state": found},
        )
