"""Running ``<hermes-bin> operator probe`` as a bounded subprocess and reading its document.

The installer checks a staged plugin with it before the swap, and doctor checks the installed
one: in a fresh process of the target Hermes, so what loads is what that Hermes would load.
The child runs in a session of its own: on a timeout or an overlong output the whole group
is killed (a plugin may have started something). Its stdout is read up to ``OUTPUT_MAX_BYTES``, its stderr is not
kept, and the document is validated field by field into a ``ProbeResult``: anything else is
``ProbeFailed`` with the reason ``timeout``, ``exit`` or ``malformed``, never what the child
printed.
"""

from __future__ import annotations

import json
import math
import os
import re
import selectors
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_cli.operator.probe import FORBIDDEN, SCHEMA, SOCKET_USE
from shared.errors import HermesError
from shared.plugin_host import HERMES_HOOKS

OUTPUT_MAX_BYTES = 64 * 1024
KILL_WAIT = 5.0  # seconds for a killed child to be reaped
MAX_NAMES = 64
MAX_LATENCY_MS = 3_600_000
EVENTS = FORBIDDEN | SOCKET_USE | {"socket.__new__"}
LOAD_ERRORS = frozenset({"manifest_invalid", "import_failed", "register_failed"})  # the host's
_CODE = re.compile(r"[a-z][a-z0-9_]{0,63}")  # a state code, and a tool name by the host's rule
_SKILL = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_KEYS = frozenset({"schema", "loaded", "error", "state", "tools", "skills", "hooks", "hook_dry_run"})
_DRY_RUN_KEYS = frozenset({"calls", "forbidden", "escaped", "forced_failure_swallowed", "latency_ms"})


class ProbeFailed(HermesError):
    """The probe gave no result: ``detail["reason"]`` is ``timeout``, ``exit`` or ``malformed``."""

    code = "plugin_probe_failed"


@dataclass(frozen=True)
class HookDryRun:
    calls: int
    forbidden: tuple[str, ...]
    escaped: tuple[str, ...]
    forced_failure_swallowed: bool
    latency_ms: int


@dataclass(frozen=True)
class ProbeResult:
    loaded: bool
    error: str | None
    state: str | None
    tools: tuple[str, ...]
    skills: tuple[str, ...]
    hooks: tuple[str, ...]
    hook_dry_run: HookDryRun


def _malformed(what: str) -> ProbeFailed:
    return ProbeFailed(f"the probe's document is malformed: {what}", detail={"reason": "malformed"})


def _fields(value: Any, keys: frozenset[str], what: str) -> dict[str, Any]:
    if not isinstance(value, dict) or set(value) != keys:
        raise _malformed(f"{what} must be an object of exactly its fields")
    return value


def _int(value: Any, field: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise _malformed(f"{field} must be an integer from {low} to {high}")
    return value


def _bool(value: Any, field: str) -> bool:
    if type(value) is not bool:
        raise _malformed(f"{field} must be true or false")
    return value


def _state(value: Any) -> str | None:
    if value is not None and not (isinstance(value, str) and _CODE.fullmatch(value)):
        raise _malformed("state must be null or a snake_case code")
    return value


def _error(value: Any) -> str | None:
    if value is not None and not (isinstance(value, str) and value in LOAD_ERRORS):
        raise _malformed("error must be null or one of the plugin host's load errors")
    return value


def _names(value: Any, field: str, allowed: re.Pattern[str] | frozenset[str]) -> tuple[str, ...]:
    """A list of at most ``MAX_NAMES`` strings, each matching ``allowed`` (a pattern or a set)."""
    if not isinstance(value, list) or len(value) > MAX_NAMES:
        raise _malformed(f"{field} must be a list of at most {MAX_NAMES} names")
    for index, name in enumerate(value):
        if not isinstance(name, str):
            raise _malformed(f"{field}[{index}] is not a name")
        if not (name in allowed if isinstance(allowed, frozenset) else allowed.fullmatch(name)):
            raise _malformed(f"{field}[{index}] is not an expected name")
    return tuple(value)


def parse_result(raw: bytes) -> ProbeResult:
    """The probe's document, checked in every field and type; ``ProbeFailed`` (malformed) else."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _malformed("not one JSON document") from None
    top = _fields(doc, _KEYS, "the document")
    if type(top["schema"]) is not int or top["schema"] != SCHEMA:
        raise _malformed(f"schema must be {SCHEMA}")
    dry = _fields(top["hook_dry_run"], _DRY_RUN_KEYS, "hook_dry_run")
    tools = _names(top["tools"], "tools", _CODE)
    if list(tools) != sorted(set(tools)):
        raise _malformed("tools must be sorted and distinct")
    return ProbeResult(
        loaded=_bool(top["loaded"], "loaded"),
        error=_error(top["error"]),
        state=_state(top["state"]),
        tools=tools,
        skills=_names(top["skills"], "skills", _SKILL),
        hooks=_names(top["hooks"], "hooks", HERMES_HOOKS),
        hook_dry_run=HookDryRun(
            calls=_int(dry["calls"], "hook_dry_run.calls", 0, MAX_NAMES),
            forbidden=_names(dry["forbidden"], "hook_dry_run.forbidden", EVENTS),
            escaped=_names(dry["escaped"], "hook_dry_run.escaped", HERMES_HOOKS),
            forced_failure_swallowed=_bool(dry["forced_failure_swallowed"], "hook_dry_run.forced_failure_swallowed"),
            latency_ms=_int(dry["latency_ms"], "hook_dry_run.latency_ms", 0, MAX_LATENCY_MS),
        ),
    )


def _kill(process: subprocess.Popen[bytes]) -> None:
    """Kill the child's whole group; only before it is reaped, while its pid is still its own."""
    try:
        os.killpg(process.pid, signal.SIGKILL)  # its own session: the group is its pid
    except (ProcessLookupError, PermissionError):
        pass  # gone already
    try:
        process.wait(timeout=KILL_WAIT)
    except subprocess.TimeoutExpired:
        pass  # unkillable (stuck in the kernel): nothing more to do


def _read(process: subprocess.Popen[bytes], deadline: float) -> bytes:
    """The child's stdout up to its end; ``ProbeFailed`` on the deadline or past the cap."""
    assert process.stdout is not None
    chunks: list[bytes] = []
    size = 0
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                raise ProbeFailed("the probe did not finish in time", detail={"reason": "timeout"})
            chunk = os.read(process.stdout.fileno(), 65536)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > OUTPUT_MAX_BYTES:
                raise _malformed(f"more than {OUTPUT_MAX_BYTES} bytes")
            chunks.append(chunk)


def run_probe(
    hermes_bin: str, plugin_dir: Path, *, env: Mapping[str, str] | None = None, timeout: float = 20.0
) -> ProbeResult:
    """Run ``hermes_bin operator probe --plugin-dir PLUGIN_DIR --json`` (``env``: default this
    process's) for at most ``timeout`` seconds; its validated result."""
    if not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0):
        raise ValueError("timeout must be a positive number of seconds")
    # The probe's scratch files go in a directory this process removes, also when it kills it.
    with tempfile.TemporaryDirectory(prefix="pohunek-probe-") as scratch:
        return _run(hermes_bin, plugin_dir, {**(os.environ if env is None else env), "TMPDIR": scratch}, timeout)


def _run(hermes_bin: str, plugin_dir: Path, env: dict[str, str], timeout: float) -> ProbeResult:
    argv = [hermes_bin, "operator", "probe", "--plugin-dir", str(plugin_dir), "--json"]
    deadline = time.monotonic() + timeout
    try:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    except OSError:
        raise ProbeFailed("the probe could not be started", detail={"reason": "exit"}) from None
    try:
        raw = _read(process, deadline)
        code = process.wait(timeout=max(deadline - time.monotonic(), 0.001))
    except subprocess.TimeoutExpired:
        _kill(process)
        raise ProbeFailed("the probe did not finish in time", detail={"reason": "timeout"}) from None
    except ProbeFailed:
        _kill(process)
        raise
    finally:
        assert process.stdout is not None
        process.stdout.close()
    if code != 0:
        raise ProbeFailed(f"the probe exited with {code}", detail={"reason": "exit", "exit_code": code})
    return parse_result(raw)
