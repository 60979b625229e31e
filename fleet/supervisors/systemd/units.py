"""systemd unit files and ``systemctl show`` output as text: rendered, and read back. No I/O.

A profile's gateway runs as ``hermes-gateway.service`` (the default profile) or
``hermes-gateway-<profile>.service``. Everything here is text in, values out: the unit file
for a profile's gateway, the ``[Service]`` environment that unit files and their drop-ins
set (which install a unit belongs to is read from its ``HERMES_HOME``), and the properties
``systemctl show`` prints. Reading unit files from disk and driving ``systemctl`` is
``manager``'s job.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from fleet.supervisors import gateway_command, gateway_environment, profile_for, unit_name_for, working_directory
from fleet.supervisors.errors import SupervisorError, UnitValueInvalid
from fleet.supervisors.scopes import check_scope
from shared import exit_codes, homes
from shared.gateways import ops

KIND = "systemd"
UNIT_PREFIX = "hermes-gateway"
UNIT_SUFFIX = ".service"

# The gateway drains within this; systemd SIGKILLs after it.
STOP_TIMEOUT = 90.0
# A gateway's loop that feeds no watchdog for this long is hung: systemd kills it (SIGABRT, so
# the journal gets its Python stacks) and restarts it. Long enough for a re-exec, which keeps
# the pid and so the armed watchdog, to import its code again on a loaded machine; nothing
# the loop does legitimately blocks it for more than a fraction of it.
WATCHDOG_DEFAULT = 30
WATCHDOG_MIN = 2  # the loop feeds every half interval: one second apart at least
WATCHDOG_MAX = 3600
# After a crash or a hang, systemd waits this long before the next start; a planned restart
# (exit 75) waits it too, so it stays short. A gateway that keeps dying backs off by itself
# (its storm breaker).
RESTART_DELAY = 1

_PROPERTY_RE = re.compile(r"^[A-Z][A-Za-z0-9]*$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
# Characters systemd's word splitter treats specially: whitespace, quotes, escapes, and ";"
# (a lone ";" separates commands in ExecStart).
_NEEDS_QUOTES_RE = re.compile(r"[\s\"'\\;\x00-\x1f\x7f]")
_UNSAFE_EXEC_RE = re.compile(r"[\"'\\$\x00-\x1f\x7f]")
_WHITESPACE = " \t\n\r"
# systemd's line reader ends a line only at these, unlike str.splitlines (which also splits
# at U+0085, U+2028 and other separators a quoted value may hold).
_LINE_END = re.compile(r"\r\n|[\r\n\x00]")


class ShowOutputInvalid(SupervisorError):
    code = "supervisor_output_invalid"


# --- names ------------------------------------------------------------------------------------


def unit_name(profile: str) -> str:
    return unit_name_for(profile, UNIT_PREFIX, UNIT_SUFFIX)


def profile_of(name: str) -> str | None:
    """The profile whose unit is exactly ``name``, or None: the inverse of ``unit_name``."""
    return profile_for(name, UNIT_PREFIX, UNIT_SUFFIX)


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


def watchdog_seconds(value: str | int) -> int:
    """The ``WatchdogSec`` an operator asked for (``--watchdog``): 0 turns it off, else whole
    seconds from ``WATCHDOG_MIN`` to ``WATCHDOG_MAX``."""
    text = str(value).strip()
    seconds = int(text) if text.isascii() and text.isdigit() else -1
    if seconds != 0 and not WATCHDOG_MIN <= seconds <= WATCHDOG_MAX:
        raise UnitValueInvalid(
            f"--watchdog must be 0 (off) or whole seconds from {WATCHDOG_MIN} to {WATCHDOG_MAX}, not {value!r}",
            detail={"field": "watchdog", "value": str(value)},
        )
    return seconds


def render(profile: str, home: Path, *, scope: str, python: str | None = None, watchdog: int = WATCHDOG_DEFAULT) -> str:
    """The unit file text for ``profile``'s gateway running with ``HERMES_HOME=home``
    (and ``python``, by default this interpreter), its loop watched for ``watchdog`` seconds
    (0: not watched)."""
    check_scope(scope)
    watchdog = watchdog_seconds(watchdog)
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
        # on-failure covers a watchdog kill too.
        "Restart=on-failure",
        f"RestartSec={RESTART_DELAY}",
        f"WatchdogSec={watchdog}",
        # 75: a planned restart (drained, new code on disk): restarted, and logged as a success
        # rather than a failure; 78: broken config, do not loop.
        f"SuccessExitStatus={exit_codes.PLANNED_RESTART}",
        f"RestartForceExitStatus={exit_codes.PLANNED_RESTART}",
        f"RestartPreventExitStatus={exit_codes.CONFIG}",
        f"TimeoutStopSec={STOP_TIMEOUT:g}",
        "KillSignal=SIGTERM",
        *_hardening(home, scope),
        "",
        "[Install]",
        f"WantedBy={'multi-user.target' if scope == 'system' else 'default.target'}",
    ]
    return "\n".join(lines) + "\n"


def _hardening(home: Path, scope: str) -> list[str]:
    """The sandbox of a gateway's unit: what it may write, reach and call. ``systemd-analyze
    security`` scores it 2.2 in either scope (an unhardened unit: 9.6)."""
    lines = [
        "# The sandbox: the gateway writes its home and nothing else, and needs no privilege.",
        # A core of the gateway would hold its profile's secrets; the watchdog's SIGABRT has
        # the gateway print its Python stacks to the journal instead.
        "LimitCORE=0",
        "UMask=0077",  # a home is private: 0700 dirs, 0600 files
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=",
        "AmbientCapabilities=",
        # Every path read-only (the install tree too: Python runs without writing __pycache__,
        # and an update compiles the tree from the CLI, outside the unit) ...
        "ProtectSystem=strict",
        "ProtectHome=read-only",
        # ... but the home: its state, locks, logs and run/ sockets.
        f"ReadWritePaths={quote_word(str(home), always=True)}",  # a list: quoted, as one word
    ]
    if not homes.run_dir_fits(home, ops.SERVICE):
        # Its sockets' paths would be too long in its home: they go in a short dir the CLI
        # looks in too, under $XDG_RUNTIME_DIR (a user manager's %t) or else /tmp. So no
        # PrivateTmp: a private /tmp would hide them from the CLI.
        if scope == "user":  # %t/hermes, made by the manager (writable, kept across stops)
            lines += ["RuntimeDirectory=hermes", "RuntimeDirectoryMode=0700", "RuntimeDirectoryPreserve=yes"]
        else:  # a system service has no XDG_RUNTIME_DIR: /tmp/hermes-<uid>
            lines.append("ReadWritePaths=/tmp")
    return [
        *lines,
        "PrivateDevices=yes",
        "DevicePolicy=closed",
        "PrivateMounts=yes",
        "ProtectKernelTunables=yes",
        "ProtectKernelModules=yes",
        "ProtectKernelLogs=yes",
        "ProtectControlGroups=yes",
        "ProtectClock=yes",
        "ProtectHostname=yes",
        "RestrictNamespaces=yes",
        "RestrictRealtime=yes",
        "RestrictSUIDSGID=yes",
        "LockPersonality=yes",
        # ipc sockets, and TCP for a mesh across hosts and the model provider's HTTPS: so no
        # PrivateNetwork or IP allow list either.
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
        "SystemCallArchitectures=native",
        "SystemCallFilter=@system-service",
        # Not ~@resources: libzmq sets its I/O threads' scheduling, and aborts when refused.
        "SystemCallFilter=~@privileged",
        "SystemCallErrorNumber=EPERM",  # a refused call fails, rather than killing the gateway
    ]


# --- reading unit files -----------------------------------------------------------------------


def watchdog_of(text: str) -> int:
    """The watchdog a unit file's text sets (its last ``WatchdogSec=`` in whole seconds, as
    ``render`` writes it), else the default: what a rewrite of the unit keeps."""
    found = [value for key, value in _section_assignments(text, "Service") if key == "WatchdogSec"]
    try:
        return watchdog_seconds(found[-1]) if found else WATCHDOG_DEFAULT
    except UnitValueInvalid:
        return WATCHDOG_DEFAULT


def service_environment(texts: Sequence[str]) -> dict[str, str]:
    """The ``[Service]`` environment set by a unit file's text and its drop-ins' (in order).

    Specifiers other than ``%%`` are left as written: without the manager they cannot be
    resolved, so such a value never equals a real home.
    """
    environment: dict[str, str] = {}
    for text in texts:
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
    for raw in _LINE_END.split(text):
        line = raw.strip(_WHITESPACE)
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
