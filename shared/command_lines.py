"""The canonical argv matchers: which Hermes command a command line runs, if any.

Command lines are classified only here. The matchers tokenize the FULL argv and walk it the
way the ``hermes`` parser would; never test argv for substrings (``kanban --preserve-cache``
contains "serve", a flag value can equal a subcommand). The flags that take a value are read
from the CLI's own parser (``shared.cli_grammar.build_top_level_parser()``), so a flag added
there is understood here without a second list. No I/O: text in, verdict out.
"""

from __future__ import annotations

import argparse
import functools
import re
from collections.abc import Sequence

Argv = str | Sequence[str]

_INTERPRETER = re.compile(r"pythonw?(\d+(\.\d+)?)?")
_INTERPRETER_EXE = re.compile(r"pythonw?(\d+(\.\d+)?)?\.exe", re.IGNORECASE)
# `python -m NAME` entries; import names are case-sensitive on every platform.
_MODULES = {"hermes_cli.main": "hermes", "hermes_cli": "hermes", "services.gateway": "gateway"}


@functools.cache
def value_flags(subcommand: str | None = None) -> frozenset[str]:
    """Option strings that take a value, for the top-level parser or one subcommand's parser.

    Derived from ``build_top_level_parser()``; cached, so call ``value_flags.cache_clear()``
    after changing the parser at runtime. A subcommand without its own parser has none.
    """
    from shared import cli_grammar  # lazy: only a command line being matched needs the grammar

    parser = cli_grammar.build_top_level_parser()
    if subcommand is not None:
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        command = subparsers[0].choices.get(subcommand) if subparsers else None
        if command is None:
            return frozenset()
        parser = command
    return frozenset(s for a in parser._actions if a.option_strings and a.nargs != 0 for s in a.option_strings)


@functools.cache
def profile_flags() -> frozenset[str]:
    """The profile selector's option strings. Hermes accepts them before and after the
    command, so they are skipped anywhere after the entry. Derived like ``value_flags``."""
    from shared import cli_grammar

    parser = cli_grammar.build_top_level_parser()
    return frozenset(s for a in parser._actions if a.dest == "profile" for s in a.option_strings)


def _split(command: str) -> list[str]:
    """Whitespace-split honouring "double" and 'single' quotes; backslashes stay literal (Windows paths)."""
    tokens: list[str] = []
    current: list[str] = []
    quote: str | None = None
    in_token = False
    for ch in command:
        if quote:
            if ch == quote:
                quote = None
            else:
                current.append(ch)
        elif ch in "\"'":
            quote, in_token = ch, True
        elif ch.isspace():
            if in_token:
                tokens.append("".join(current))
                current, in_token = [], False
        else:
            current.append(ch)
            in_token = True
    if in_token:
        tokens.append("".join(current))
    return tokens


def _tokens(cmdline: object) -> list[str] | None:
    if isinstance(cmdline, str):
        tokens = _split(cmdline)
    elif isinstance(cmdline, (list, tuple)) and all(isinstance(t, str) for t in cmdline):
        tokens = list(cmdline)
    else:
        return None
    return tokens or None


def _basename(path: str) -> str:
    return re.split(r"[/\\]", path)[-1]


def _named(basename: str, name: str) -> bool:
    # POSIX names are case-sensitive; only a Windows ``.exe`` name may differ in case.
    return basename == name or basename.lower() == f"{name}.exe"


def _path_ends_with(path: str, suffix: str) -> bool:
    path = path.replace("\\", "/")
    return path == suffix or path.endswith(f"/{suffix}")


def _script_kind(path: str) -> str | None:
    """'hermes' or 'gateway' when ``path`` (an executable or an interpreter's script) is a Hermes entry."""
    base = _basename(path)
    if _named(base, "hermes") or _path_ends_with(path, "hermes_cli/main.py"):
        return "hermes"
    if _named(base, "hermes-gateway") or _path_ends_with(path, "gateway/run.py"):
        return "gateway"
    return None


def _interpreter_entry(tokens: list[str]) -> tuple[str, int] | None:
    """Walk CPython's own options to the script or ``-m`` module it runs."""
    i = 1
    while i < len(tokens):
        token = tokens[i]
        if token == "--":
            i += 1
            break
        if not token.startswith("-") or token == "-":
            break
        if token.startswith("--"):  # long options: only this one takes a value
            i += 2 if token == "--check-hash-based-pycs" else 1
            continue
        for j, opt in enumerate(token[1:], start=1):  # short options combine, as in `-Im module`
            attached = token[j + 1 :]
            if opt == "c":  # the Hermes words would be inside a program string
                return None
            if opt == "m":
                if attached:
                    module, after = attached, i + 1
                elif i + 1 < len(tokens):
                    module, after = tokens[i + 1], i + 2
                else:
                    return None
                kind = _MODULES.get(module)
                return (kind, after) if kind else None
            if opt in "WX":
                if not attached:
                    i += 1  # the value is the next token
                break
        i += 1
    if i < len(tokens) and (kind := _script_kind(tokens[i])):
        return kind, i + 1
    return None


def _entry(tokens: list[str]) -> tuple[str, int] | None:
    """('hermes' | 'gateway', index after the entry) when argv[0] itself starts Hermes."""
    if kind := _script_kind(tokens[0]):
        return kind, 1
    base = _basename(tokens[0])
    if _INTERPRETER.fullmatch(base) or _INTERPRETER_EXE.fullmatch(base):
        return _interpreter_entry(tokens)
    return None


def _next_positional(tokens: list[str], i: int, takes_value: frozenset[str]) -> int | None:
    """Index of the first positional token from ``i``, stepping over flags and their values."""
    while i < len(tokens):
        token = tokens[i]
        if token == "--":
            return i + 1 if i + 1 < len(tokens) else None
        if token in takes_value or token in profile_flags():
            i += 2
        elif token.startswith("-") and token != "-":
            i += 1  # `--flag=value`, attached `-mvalue`, or a flag that takes no value
        else:
            return i
    return None


def _command(cmdline: object) -> tuple[list[str], str, int | None] | None:
    """(tokens, entry kind, index of the top-level subcommand) for a Hermes argv, else None."""
    tokens = _tokens(cmdline)
    entry = _entry(tokens) if tokens else None
    if tokens is None or entry is None:
        return None
    kind, start = entry
    if kind == "gateway":
        return tokens, kind, None
    return tokens, kind, _next_positional(tokens, start, value_flags())


def holder_subcommand(argv: Argv | None) -> str | None:
    """The top-level subcommand a Hermes argv runs; None if it is not Hermes or names none."""
    command = _command(argv)
    if command is None:
        return None
    tokens, kind, index = command
    if kind == "gateway":
        return "gateway"
    return None if index is None else tokens[index] or None


def _gateway_action(cmdline: object) -> str | None:
    command = _command(cmdline)
    if command is None:
        return None
    tokens, kind, index = command
    if kind == "gateway":
        return "run"
    if index is None or tokens[index] != "gateway":
        return None
    action = _next_positional(tokens, index + 1, value_flags("gateway"))
    return "run" if action is None else tokens[action]  # bare `hermes gateway` runs the gateway


def looks_like_gateway_command_line(cmdline: Argv | None) -> bool:
    """True only for a process running the gateway (`gateway run` or a gateway-dedicated entry)."""
    return _gateway_action(cmdline) == "run"


def looks_like_gateway_runtime_command_line(cmdline: Argv | None) -> bool:
    """True also for `gateway restart`: without a service manager the restart runs the gateway in-process."""
    return _gateway_action(cmdline) in ("run", "restart")
