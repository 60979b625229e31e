"""The canonical argv matchers: which Hermes command a command line runs, if any.

Command lines are classified only here. The matchers tokenize the FULL argv and walk it the
way the ``hermes`` parser would; never test argv for substrings (``kanban --preserve-cache``
contains "serve", a flag value can equal a subcommand). The flags that take a value are read
from the CLI's own parser (``fleet.cli_grammar.build_top_level_parser()``), so a flag added
there is understood here without a second list. No I/O: text in, verdict out.

A line with no command that names a chat to go back to (``hermes --resume REF``,
``hermes -c``) runs ``chat``, as the CLI decides (``cli_grammar.implied_command``). The runpy
bootstrap a launcher may use, ``python -c "import sys, runpy; sys.argv = [...];
runpy.run_module('hermes_cli.main', run_name='__main__')"``, runs the argv of its list: the
program text is parsed (``ast``) and only that list literal is evaluated, never the program.
"""

from __future__ import annotations

import argparse
import ast
import functools
import re
import warnings
from collections.abc import Sequence

Argv = str | Sequence[str]

# A versioned name may end in "t", a free-threaded build: python3.13t, python3t.
_INTERPRETER = re.compile(r"pythonw?(\d+(\.\d+)?t?)?")
_INTERPRETER_EXE = re.compile(r"pythonw?(\d+(\.\d+)?t?)?\.exe", re.IGNORECASE)
# `python -m NAME` entries: the modules that run something (hermes_cli has no __main__, so
# `python -m hermes_cli` runs nothing). Import names are case-sensitive on every platform.
_MODULES = {"hermes_cli.main": "hermes", "services.gateway": "gateway"}
# A bootstrap program longer than this is no bootstrap (and is not parsed).
_MAX_BOOTSTRAP = 4096
_MAX_BOOTSTRAP_ARGS = 256


@functools.cache
def value_flags(subcommand: str | None = None) -> frozenset[str]:
    """Option strings that take a value, for the top-level parser or one subcommand's parser.

    Derived from ``build_top_level_parser()``; cached, so call ``value_flags.cache_clear()``
    after changing the parser at runtime. A subcommand without its own parser has none.
    """
    from fleet import cli_grammar  # lazy: only a command line being matched needs the grammar

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
    from fleet import cli_grammar

    parser = cli_grammar.build_top_level_parser()
    return frozenset(s for a in parser._actions if a.dest == "profile" for s in a.option_strings)


@functools.cache
def implying_flags() -> frozenset[str]:
    """The option strings that make a line with no command run ``chat``. Derived like ``value_flags``."""
    from fleet import cli_grammar

    parser = cli_grammar.build_top_level_parser()
    return frozenset(s for a in parser._actions if a.dest in cli_grammar.IMPLYING_DESTS for s in a.option_strings)


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


def _interpreter_entry(tokens: list[str]) -> tuple[str, list[str], int] | None:
    """Walk CPython's own options to the script, ``-m`` module or bootstrap program it runs."""
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
            if opt == "c":  # a program: Hermes only when it is the runpy bootstrap
                program = attached or (tokens[i + 1] if i + 1 < len(tokens) else "")
                bootstrap = _bootstrap(program)
                return (bootstrap[0], bootstrap[1], 1) if bootstrap else None
            if opt == "m":
                if attached:
                    module, after = attached, i + 1
                elif i + 1 < len(tokens):
                    module, after = tokens[i + 1], i + 2
                else:
                    return None
                kind = _MODULES.get(module)
                return (kind, tokens, after) if kind else None
            if opt in "WX":
                if not attached:
                    i += 1  # the value is the next token
                break
        i += 1
    if i < len(tokens) and (kind := _script_kind(tokens[i])):
        return kind, tokens, i + 1
    return None


def _bootstrap(program: str) -> tuple[str, list[str]] | None:
    """(entry kind, argv) of ``import sys, runpy; sys.argv = [...]; runpy.run_module(MODULE,
    run_name='__main__')``, statement for statement; None for any other program."""
    if len(program) > _MAX_BOOTSTRAP:
        return None
    try:
        with warnings.catch_warnings():  # a matcher prints nothing (ast warns of odd escapes)
            warnings.simplefilter("ignore")
            body = ast.parse(program, mode="exec").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    imports = [stmt for stmt in body[:-2] if isinstance(stmt, ast.Import)]
    if len(body) < 3 or len(imports) != len(body) - 2:
        return None
    if any(alias.asname for stmt in imports for alias in stmt.names):
        return None
    if sorted(alias.name for stmt in imports for alias in stmt.names) != ["runpy", "sys"]:
        return None
    argv, module = _assigned_argv(body[-2]), _run_module(body[-1])
    kind = _MODULES.get(module) if module else None
    return (kind, argv) if kind and argv else None


def _assigned_argv(stmt: ast.stmt) -> list[str] | None:
    """The list of strings in ``sys.argv = [...]``: only that literal is evaluated."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.List)):
        return None
    target = stmt.targets[0]
    if not (isinstance(target, ast.Attribute) and _is_name(target.value, "sys") and target.attr == "argv"):
        return None
    if not 0 < len(stmt.value.elts) <= _MAX_BOOTSTRAP_ARGS:
        return None
    try:
        argv = ast.literal_eval(stmt.value)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return None
    return argv if all(isinstance(arg, str) for arg in argv) else None


def _run_module(stmt: ast.stmt) -> str | None:
    """MODULE of ``runpy.run_module(MODULE, run_name='__main__')`` (``alter_sys`` may be given)."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return None
    call = stmt.value
    func = call.func
    if not (isinstance(func, ast.Attribute) and _is_name(func.value, "runpy") and func.attr == "run_module"):
        return None
    module = call.args[0] if len(call.args) == 1 else None
    if not (isinstance(module, ast.Constant) and type(module.value) is str):
        return None
    keywords = {k.arg: k.value for k in call.keywords}
    if None in keywords or len(keywords) != len(call.keywords) or not set(keywords) <= {"run_name", "alter_sys"}:
        return None
    run_name, alter_sys = keywords.get("run_name"), keywords.get("alter_sys")
    if not (isinstance(run_name, ast.Constant) and run_name.value == "__main__"):
        return None  # any other name leaves the module's main block unrun
    if alter_sys is not None and not (isinstance(alter_sys, ast.Constant) and type(alter_sys.value) is bool):
        return None
    return module.value


def _is_name(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _entry(tokens: list[str]) -> tuple[str, list[str], int] | None:
    """('hermes' | 'gateway', the argv it runs, index after the entry) when argv[0] starts Hermes."""
    if kind := _script_kind(tokens[0]):
        return kind, tokens, 1
    base = _basename(tokens[0])
    if _INTERPRETER.fullmatch(base) or _INTERPRETER_EXE.fullmatch(base):
        return _interpreter_entry(tokens)
    return None


def _next_positional(
    tokens: list[str], i: int, takes_value: frozenset[str], flags: list[str] | None = None
) -> int | None:
    """Index of the first positional token from ``i``, stepping over flags and their values
    (the flags stepped over are added to ``flags``)."""
    while i < len(tokens):
        token = tokens[i]
        if token == "--":
            return i + 1 if i + 1 < len(tokens) else None
        if token.startswith("-") and token != "-" and flags is not None:
            flags.append(token)
        if token in takes_value or token in profile_flags():
            i += 2
        elif token.startswith("-") and token != "-":
            i += 1  # `--flag=value`, attached `-mvalue`, or a flag that takes no value
        else:
            return i
    return None


def _names_one_of(token: str, options: frozenset[str]) -> bool:
    """Whether the flag ``token`` is one of ``options``: exactly, as ``--long=value``, or as a
    short option with its value attached (``-rREF``)."""
    if token.startswith("--"):
        return token.split("=", 1)[0] in options
    return token[:2] in options


def _command(cmdline: object) -> tuple[list[str], str, int | None, list[str]] | None:
    """(argv, entry kind, index of the top-level subcommand (of a gateway entry's first
    argument), the top-level flags before it) for a Hermes command line, else None."""
    tokens = _tokens(cmdline)
    entry = _entry(tokens) if tokens else None
    if entry is None:
        return None
    kind, argv, start = entry
    flags: list[str] = []
    if kind == "gateway":
        return argv, kind, start, flags
    return argv, kind, _next_positional(argv, start, value_flags(), flags), flags


def holder_subcommand(argv: Argv | None) -> str | None:
    """The top-level subcommand a Hermes argv runs; None if it is not Hermes or names none."""
    from fleet import cli_grammar

    command = _command(argv)
    if command is None:
        return None
    tokens, kind, index, flags = command
    if kind == "gateway":
        return "gateway"
    if index is None:
        return cli_grammar.IMPLIED_COMMAND if any(_names_one_of(f, implying_flags()) for f in flags) else None
    return tokens[index] or None


def _gateway_action(cmdline: object) -> tuple[str, list[str]] | None:
    """(the gateway action a line runs, the arguments that action's own parser reads)."""
    command = _command(cmdline)
    if command is None:
        return None
    tokens, kind, index, _ = command
    if kind == "gateway":
        return "run", tokens[index:] if index is not None else []
    if index is None or tokens[index] != "gateway":
        return None
    action = _next_positional(tokens, index + 1, value_flags("gateway"))
    if action is None:
        return "run", []  # bare `hermes gateway` runs the gateway; its own parser has no --serve
    return tokens[action], tokens[action + 1 :]


def _action(cmdline: object) -> str | None:
    found = _gateway_action(cmdline)
    return found[0] if found else None


def looks_like_gateway_command_line(cmdline: Argv | None) -> bool:
    """True only for a process running the gateway (`gateway run` or a gateway-dedicated entry)."""
    return _action(cmdline) == "run"


def looks_like_gateway_runtime_command_line(cmdline: Argv | None) -> bool:
    """True also for `gateway restart`: without a service manager the restart runs the gateway in-process."""
    return _action(cmdline) in ("run", "restart")


@functools.cache
def _run_flags() -> tuple[frozenset[str], frozenset[str]]:
    """(the option strings of ``gateway run`` that take a value, those naming the served set).
    Derived like ``value_flags``; the gateway module's own entry reads the same two flags."""
    from fleet import cli_grammar

    parser = cli_grammar.build_top_level_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    gateway = commands.choices["gateway"]
    actions = next(a for a in gateway._actions if isinstance(a, argparse._SubParsersAction))
    run = actions.choices["run"]
    takes_value = [a for a in run._actions if a.option_strings and a.nargs != 0]
    serve = frozenset(s for a in takes_value if a.dest == "serve" for s in a.option_strings)
    return frozenset(s for a in takes_value for s in a.option_strings), serve


def gateway_served_profiles(cmdline: Argv | None) -> tuple[str, ...] | None:
    """The profiles a gateway line serves from one process (``--serve A,B``), normalized as the
    process normalizes them (``homes.parse_served``); None for a line that runs no gateway, for
    a per-profile gateway, and for a set the process would refuse. The last ``--serve`` wins, as
    in the parser; a flag's value and anything after ``--`` are never read as the flag."""
    found = _gateway_action(cmdline)
    if found is None or found[0] != "run":
        return None
    from shared import homes  # lazy, like the grammar: only a gateway line needs it

    takes_value, serve = _run_flags()
    args, value, i = found[1], None, 0
    while i < len(args):
        token = args[i]
        if token == "--":
            break
        name, attached, given = token.partition("=")
        if token.startswith("--") and attached and name in serve:
            value, i = given, i + 1
        elif token in serve:
            value, i = (args[i + 1] if i + 1 < len(args) else None), i + 2
        else:
            i += 2 if token in takes_value or token in profile_flags() else 1
    if value is None:
        return None
    try:
        return homes.parse_served(value)
    except (homes.InvalidServedSet, homes.InvalidProfileName):
        return None
