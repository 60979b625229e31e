"""systemd units for gateways: ``hermes-gateway.service`` for the default profile and
``hermes-gateway-<profile>.service`` for the others, in user or system scope.

A unit belongs to an install only if its ``Environment=`` sets ``HERMES_HOME`` to that
install's home: the name alone proves nothing (a sibling install on the same account uses
the same names). This module renders and reads unit files, drives ``systemctl`` with a
bounded timeout (listing and showing units, signalling, resetting and restarting them) and
parses ``systemctl show`` output.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path

from shared import exit_codes
from shared.errors import HermesError
from shared.files import PUBLIC_MODE, write_bytes_atomic
from shared.supervisors import (
    InstalledUnit,
    Unit,
    gateway_command,
    gateway_environment,
    profile_for,
    unit_name_for,
    working_directory,
)
from shared.supervisors.commands import command_failed, run_client
from shared.supervisors.errors import SupervisorFailed, SupervisorTimeout, SupervisorUnavailable, UnitValueInvalid
from shared.supervisors.scopes import SCOPES, check_scope, require_scope_permission

KIND = "systemd"
UNIT_PREFIX = "hermes-gateway"
UNIT_SUFFIX = ".service"
SYSTEM_UNIT_DIR = Path("/etc/systemd/system")
# sd_booted(): systemd creates this directory when it runs as PID 1.
BOOTED_MARKER = Path("/run/systemd/system")

# The gateway drains within this; systemd SIGKILLs after it. Start uses systemd's default.
STOP_TIMEOUT = 90.0
START_TIMEOUT = 90.0
# The systemctl client waits for the job; the slack covers its own start-up and the bus.
CLIENT_SLACK = 15.0
RELOAD_TIMEOUT = 30.0
# list-units, show, kill, reset-failed: the manager answers them without waiting for a job.
QUERY_TIMEOUT = 15.0

_BUS_UNREACHABLE = re.compile(r"^Failed to connect to .*bus", re.MULTILINE)
_PROPERTY_RE = re.compile(r"^[A-Z][A-Za-z0-9]*$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
# Characters systemd's word splitter treats specially: whitespace, quotes, escapes, and ";"
# (a lone ";" separates commands in ExecStart).
_NEEDS_QUOTES_RE = re.compile(r"[\s\"'\\;\x00-\x1f\x7f]")
_UNSAFE_EXEC_RE = re.compile(r"[\"'\\$\x00-\x1f\x7f]")
_WHITESPACE = " \t\n\r"


class ShowOutputInvalid(HermesError):
    code = "supervisor_output_invalid"


# --- names ------------------------------------------------------------------------------------


def unit_name(profile: str) -> str:
    return unit_name_for(profile, UNIT_PREFIX, UNIT_SUFFIX)


def profile_of(name: str) -> str | None:
    """The profile whose unit is exactly ``name``, or None: the inverse of ``unit_name``."""
    return profile_for(name, UNIT_PREFIX, UNIT_SUFFIX)


def unit_dir(*, scope: str) -> Path:
    if check_scope(scope) == "system":
        return SYSTEM_UNIT_DIR
    config = os.environ.get("XDG_CONFIG_HOME", "")
    # The XDG spec says a relative value is invalid and must be ignored.
    base = Path(config) if os.path.isabs(config) else Path.home() / ".config"
    return base / "systemd" / "user"


def unit_path(profile: str, *, scope: str) -> Path:
    return unit_dir(scope=scope) / unit_name(profile)


# --- writing unit files -----------------------------------------------------------------------


def _escape(word: str, *, exec_line: bool) -> str:
    if "\x00" in word:
        raise UnitValueInvalid(f"a unit file value cannot contain NUL: {word!r}", detail={"value": word})
    escaped = word.replace("%", "%%")  # specifiers are expanded in every value we write
    if exec_line:
        escaped = escaped.replace("$", "$$")  # ExecStart substitutes $VAR at exec time
    return escaped


def quote_word(word: str, *, exec_line: bool = False, always: bool = False) -> str:
    """``word`` as one word of a unit file value, which systemd reads back as exactly ``word``."""
    escaped = _escape(word, exec_line=exec_line)
    if not (always or not word or _NEEDS_QUOTES_RE.search(word)):
        return escaped
    escaped = escaped.replace("\\", "\\\\").replace('"', '\\"')
    escaped = _CONTROL_RE.sub(lambda m: f"\\x{ord(m.group()):02x}", escaped)
    return f'"{escaped}"'


def _path_value(path: Path) -> str:
    # Path settings are not word-split: only specifiers need escaping, and lines cannot break.
    text = str(path)
    if _CONTROL_RE.search(text):
        raise UnitValueInvalid(f"a unit file path cannot contain control characters: {text!r}", detail={"value": text})
    return _escape(text, exec_line=False)


def _exec_path(executable: str) -> str:
    # systemd runs the path literally (no $VAR substitution) and refuses quotes, backslashes
    # and control characters in it; "$" is refused too, since argv[0] would be substituted.
    if not os.path.isabs(executable) or _UNSAFE_EXEC_RE.search(executable):
        raise UnitValueInvalid(
            f"systemd cannot run {executable!r}: ExecStart needs an absolute path without quotes, "
            "backslashes, '$' or control characters",
            detail={"value": executable},
        )
    return quote_word(executable)


def render(profile: str, home: Path, *, scope: str, python: str | None = None) -> str:
    """The unit file text for ``profile``'s gateway running with ``HERMES_HOME=home``
    (and ``python``, by default this interpreter)."""
    check_scope(scope)
    home = Path(home)
    if not home.is_absolute():
        raise UnitValueInvalid(f"HERMES_HOME must be absolute in a unit file, not {home}", detail={"value": str(home)})
    executable, *arguments = gateway_command(python)
    environment = gateway_environment(home, KIND)
    lines = [
        f"# Written by `hermes gateway install` for profile {profile}.",
        "# Which install owns this unit is decided by HERMES_HOME below, not by its name.",
        "[Unit]",
        f"Description=Hermes gateway (profile {profile})",
        "After=network-online.target",
        "",
        "[Service]",
        "Type=notify",
        "NotifyAccess=main",
        "ExecStart=" + " ".join([_exec_path(executable), *(quote_word(arg, exec_line=True) for arg in arguments)]),
        f"WorkingDirectory={_path_value(working_directory())}",
        *(f"Environment={quote_word(f'{key}={value}', always=True)}" for key, value in environment.items()),
        "Restart=on-failure",
        # 75: a planned restart (drained, new code on disk); 78: broken config, do not loop.
        f"RestartForceExitStatus={exit_codes.PLANNED_RESTART}",
        f"RestartPreventExitStatus={exit_codes.CONFIG}",
        f"TimeoutStopSec={STOP_TIMEOUT:g}",
        "KillSignal=SIGTERM",
        "",
        "[Install]",
        f"WantedBy={'multi-user.target' if scope == 'system' else 'default.target'}",
    ]
    return "\n".join(lines) + "\n"


def install(profile: str, home: Path, *, scope: str = "user", euid: int | None = None) -> InstalledUnit:
    """Write the unit atomically (0644), then ``daemon-reload`` if a manager is reachable."""
    require_scope_permission(scope, euid=euid)
    home = Path(home)
    text = render(profile, home, scope=scope)
    path = unit_path(profile, scope=scope)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, text.encode("utf-8"), mode=PUBLIC_MODE)
    reloaded, note = _daemon_reload(scope)
    return InstalledUnit(
        kind=KIND,
        name=unit_name(profile),
        profile=profile,
        home=home,
        path=path,
        scope=scope,
        reloaded=reloaded,
        note=note,
    )


def _daemon_reload(scope: str) -> tuple[bool, str | None]:
    # The file is written whatever happens here, so a failed reload is reported, not raised.
    try:
        systemctl(scope, "daemon-reload", timeout=RELOAD_TIMEOUT)
    except (SupervisorUnavailable, SupervisorFailed, SupervisorTimeout) as exc:
        return False, exc.message
    return True, None


# --- driving systemctl ------------------------------------------------------------------------


def systemctl_argv(scope: str, *args: str) -> list[str]:
    # --no-ask-password: a polkit prompt would hang an unattended run until the timeout.
    return ["systemctl", *(["--user"] if check_scope(scope) == "user" else []), "--no-ask-password", *args]


def systemctl(scope: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``systemctl [--user] ARGS``; typed errors when there is no manager or it fails."""
    argv = systemctl_argv(scope, *args)
    if shutil.which("systemctl") is None:
        raise SupervisorUnavailable("systemctl is not installed here", detail={"command": argv})
    if not BOOTED_MARKER.is_dir():
        raise SupervisorUnavailable(f"systemd is not running here (no {BOOTED_MARKER})", detail={"command": argv})
    result = run_client(argv, timeout=timeout)
    if result.returncode != 0:
        if _BUS_UNREACHABLE.search(result.stderr):
            raise SupervisorUnavailable(
                f"the systemd {scope} manager is not reachable: {result.stderr.strip()}",
                detail={"command": argv, "stderr": result.stderr.strip()},
            )
        raise command_failed(argv, result)
    return result


def _act(action: str, unit: Unit, timeout: float, *options: str) -> None:
    if unit.kind != KIND:
        raise ValueError(f"{unit.name} is a {unit.kind} unit, not a systemd one")
    systemctl(unit.scope, action, *options, unit.name, timeout=timeout)


def start(unit: Unit, *, timeout: float = START_TIMEOUT + CLIENT_SLACK) -> None:
    _act("start", unit, timeout)


def stop(unit: Unit, *, timeout: float = STOP_TIMEOUT + CLIENT_SLACK) -> None:
    _act("stop", unit, timeout)


def restart(unit: Unit, *, timeout: float = STOP_TIMEOUT + START_TIMEOUT + CLIENT_SLACK) -> None:
    _act("restart", unit, timeout)


def kill_main(unit: Unit, signal: str, *, timeout: float = QUERY_TIMEOUT) -> None:
    """Send ``signal`` (``USR1``) to the unit's main process only, not to the rest of its cgroup."""
    _act("kill", unit, timeout, "-s", signal, "--kill-whom=main")


def reset_failed(unit: Unit, *, timeout: float = QUERY_TIMEOUT) -> None:
    """Clear the unit's failed state and its start-rate counter, so that a start is not refused."""
    _act("reset-failed", unit, timeout)


def list_units(scope: str, *, timeout: float = QUERY_TIMEOUT) -> list[str]:
    """The names of the units matching ``hermes-gateway*`` that the ``scope`` manager has loaded,
    in any state. The pattern also matches units that are not gateways (``hermes-gatewayd``):
    ``profile_of`` tells them apart."""
    result = systemctl(scope, "list-units", "--all", "--plain", "--no-legend", f"{UNIT_PREFIX}*", timeout=timeout)
    # One unit a line: NAME LOAD ACTIVE SUB DESCRIPTION (--plain prints no status bullet).
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]


def show(scope: str, name: str, properties: Iterable[str], *, timeout: float = QUERY_TIMEOUT) -> dict[str, str]:
    """``properties`` of the unit ``name`` as the ``scope`` manager reports them (``parse_show``).
    A unit the manager does not know is not an error: its ``LoadState`` says ``not-found``."""
    arguments = [word for prop in properties for word in ("-p", prop)]
    return parse_show(systemctl(scope, "show", *arguments, name, timeout=timeout).stdout)


# --- reading unit files -----------------------------------------------------------------------


def find(profile: str, home: Path) -> Unit | None:
    """``profile``'s unit in either scope, only if it runs the gateway with ``HERMES_HOME=home``."""
    home = Path(home)
    for scope in SCOPES:
        path = unit_path(profile, scope=scope)
        environment = unit_file_environment(path)
        if environment is None or "HERMES_HOME" not in environment:
            continue
        if Path(environment["HERMES_HOME"]) == home:
            return Unit(kind=KIND, name=unit_name(profile), profile=profile, home=home, path=path, scope=scope)
    return None


def unit_file_environment(path: Path) -> dict[str, str] | None:
    """The ``[Service]`` environment of the unit at ``path`` with its drop-ins beside it
    (``<path>.d/*.conf``), or None when the file cannot be read.

    Specifiers other than ``%%`` are left as written: without the manager they cannot be
    resolved, so such a value never equals a real home.
    """
    sources = [path, *sorted(Path(f"{path}.d").glob("*.conf"))]
    environment: dict[str, str] = {}
    for index, source in enumerate(sources):
        try:
            text = source.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            if index == 0:
                return None
            continue
        for key, value in _section_assignments(text, "Service"):
            if key != "Environment":
                continue
            if not value:
                environment.clear()  # an empty assignment resets the list, as in systemd
                continue
            try:
                for word in _split_words(value, c_escapes=True):
                    environment.update(_assignments([_unescape_specifiers(word)]))
            except ValueError:
                pass  # as systemd: the words before a syntax error count, the rest of the line not
    return environment


def _section_assignments(text: str, section: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    current = ""
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line[0] in "#;"):
            continue
        if line.endswith("\\"):  # a continuation: joined with a space, as systemd does
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        if sep and current == section:
            found.append((key.strip(), value.strip()))
    return found


def _unescape_specifiers(word: str) -> str:
    return word.replace("%%", "%")


# --- systemctl show ---------------------------------------------------------------------------


def parse_show(text: str) -> dict[str, str]:
    """``systemctl show`` output of one unit as ``{property: value}``, in systemd's order.

    Values are kept exactly as printed (``1min 30s``, ``infinity``); ``Environment`` is
    split further by ``parse_environment``. Output of ``show --value`` has no names and is
    refused, as is a property printed twice (the output of more than one unit).
    """
    properties: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, sep, value = line.partition("=")
        if not sep or not _PROPERTY_RE.fullmatch(name):
            raise ShowOutputInvalid(
                f"line {number} of systemctl show output is not PROPERTY=VALUE: {line!r}",
                detail={"line": number, "text": line},
            )
        if name in properties:
            raise ShowOutputInvalid(
                f"property {name} appears twice in systemctl show output (more than one unit?)",
                detail={"line": number, "property": name},
            )
        properties[name] = value
    return properties


def parse_environment(value: str) -> dict[str, str]:
    """The ``Environment`` property as shown by systemctl: ``A=b "C=d e"`` → ``{"A": "b", "C": "d e"}``.

    systemctl quotes an entry with double quotes when it needs it and escapes ``"``, ``\\``,
    ``$`` and backquote inside them with a backslash.
    """
    try:
        return _assignments(list(_split_words(value, c_escapes=False)))
    except ValueError as exc:
        raise ShowOutputInvalid(f"unreadable Environment property: {exc}", detail={"value": value}) from None


def _assignments(words: Iterable[str]) -> dict[str, str]:
    environment: dict[str, str] = {}
    for word in words:
        name, sep, value = word.partition("=")
        # systemd drops an entry that is not NAME=VALUE rather than failing the unit.
        if sep and _ENV_NAME_RE.fullmatch(name):
            environment[name] = value
    return environment


_C_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    '"': '"',
    "'": "'",
    "s": " ",
}
_HEX_LENGTHS = {"x": 2, "u": 4, "U": 8}


def _split_words(value: str, *, c_escapes: bool) -> Iterator[str]:
    """Split like systemd's ``extract_first_word`` with unquoting: whitespace separates words,
    ``"…"`` and ``'…'`` quote, a backslash escapes. With ``c_escapes`` (unit files) a
    backslash starts a C escape; without (systemctl output) it escapes the next character."""
    i, n = 0, len(value)
    while i < n:
        while i < n and value[i] in _WHITESPACE:
            i += 1
        if i >= n:
            break
        word: list[str] = []
        quote = ""
        while i < n:
            char = value[i]
            if not quote and char in _WHITESPACE:
                break
            if char == "\\":
                decoded, i = _unescape(value, i + 1, c_escapes=c_escapes)
                word.append(decoded)
                continue
            if quote and char == quote:
                quote = ""
            elif not quote and char in "\"'":
                quote = char
            else:
                word.append(char)
            i += 1
        if quote:
            raise ValueError(f"unbalanced quote in {value!r}")
        yield "".join(word)


def _unescape(value: str, i: int, *, c_escapes: bool) -> tuple[str, int]:
    """The character escaped at ``value[i]`` (just after the backslash) and the index after it."""
    if i >= len(value):
        raise ValueError(f"trailing backslash in {value!r}")
    char = value[i]
    if not c_escapes:
        return char, i + 1
    if char in _C_ESCAPES:
        return _C_ESCAPES[char], i + 1
    if char in _HEX_LENGTHS:
        digits = value[i + 1 : i + 1 + _HEX_LENGTHS[char]]
        if len(digits) != _HEX_LENGTHS[char] or not all(d in "0123456789abcdefABCDEF" for d in digits):
            raise ValueError(f"bad \\{char} escape in {value!r}")
        return _codepoint(int(digits, 16), value), i + 1 + len(digits)
    if char in "01234567":
        digits = value[i : i + 3]
        if len(digits) != 3 or not all(d in "01234567" for d in digits):
            raise ValueError(f"bad octal escape in {value!r}")
        return _codepoint(int(digits, 8), value), i + 3
    raise ValueError(f"unknown escape \\{char} in {value!r}")


def _codepoint(code: int, value: str) -> str:
    if code == 0 or code > 0x10FFFF:
        raise ValueError(f"escape for code point {code:#x} in {value!r} is not allowed")
    return chr(code)
