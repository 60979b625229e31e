"""Running the probe script (``hermes_cli.operator.probe_script``) in the Python beside the
target Hermes, and reading its document.

The installer checks a staged plugin with it before the swap, and doctor checks the installed
one: in a fresh process of the interpreter Hermes runs in, with ``-I`` (no environment, no
user site, no current directory on its path), so what loads is what that Python would load
and nothing of this project's. The child is bounded as every Hermes command is
(``hermes_cli.operator.hermes_bin.run``): its whole group is killed on a timeout or an
overlong output. The document is validated field by field into a ``ProbeResult``: anything
else is ``ProbeFailed`` with the reason ``timeout``, ``exit`` or ``malformed``, never what the
child printed.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_cli.operator import hermes_bin, probe_script
from hermes_cli.operator.errors import IntegrationError
from hermes_cli.operator.probe_script import FORBIDDEN, SCHEMA, SOCKET_USE
from hermes_cli.plugin_host import HERMES_HOOKS

MAX_NAMES = 64
MAX_LATENCY_MS = 3_600_000
EVENTS = FORBIDDEN | SOCKET_USE | {"socket.__new__"}
LOAD_ERRORS = frozenset({"manifest_invalid", "import_failed", "register_failed"})  # the host's
_CODE = re.compile(r"[a-z][a-z0-9_]{0,63}")  # a state code, and a tool name by the host's rule
_SKILL = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_KEYS = frozenset({"schema", "loaded", "error", "state", "policy_bound", "tools", "skills", "hooks", "hook_dry_run"})
_DRY_RUN_KEYS = frozenset({"calls", "forbidden", "escaped", "forced_failure_swallowed", "latency_ms"})


class ProbeFailed(IntegrationError):
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
    policy_bound: bool
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
        policy_bound=_bool(top["policy_bound"], "policy_bound"),
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


SCRIPT = Path(probe_script.__file__).read_text(encoding="utf-8")
_REASONS = {"hermes_timeout": "timeout", "hermes_output_limit": "malformed"}


def run_probe(
    bin_path: str, plugin_dir: Path, policy_file: Path, *, timeout: float = hermes_bin.COMMAND_TIMEOUT
) -> ProbeResult:
    """Run the probe on ``plugin_dir`` (which must be bound to ``policy_file``) in the Python
    beside ``bin_path``; its validated result. ``HermesUnusable`` when that Python is unsafe."""
    python = hermes_bin.sibling_python(bin_path)
    # The probe's scratch files go in a directory this process removes, also when it kills it.
    with tempfile.TemporaryDirectory(prefix="pohunek-probe-") as scratch:
        argv = [python, "-I", "-c", SCRIPT, "--", str(plugin_dir), str(policy_file)]
        try:
            raw = hermes_bin.run(
                argv, {**hermes_bin.child_env(None), "TMPDIR": scratch}, what="the plugin probe", timeout=timeout
            )
        except hermes_bin.HermesUnusable as exc:
            detail = {"reason": _REASONS.get(exc.code, "exit")}
            if exc.detail and "exit" in exc.detail:
                detail["exit_code"] = exc.detail["exit"]
            raise ProbeFailed(f"the probe gave no result: {exc.message}", detail=detail) from None
    return parse_result(raw)
