"""The ``hermes`` command line's grammar: its commands, their flags and arguments.

One parser, built by ``build_top_level_parser()``, for the CLI that runs it and for the argv
matchers (``fleet.command_lines``) that walk other processes' command lines the way it
would; so a flag added here is understood there without a second list. Building it imports
nothing but argparse.

A command's parser is made only when it is looked up (``_Commands``): ``hermes gateway
status`` builds the top-level, ``gateway`` and ``status`` parsers and no other, while the
matchers, which look at every command, get them all. Each command's parser sets
``command_words`` (``"gateway drain"``); which function runs a command is the CLI's business
(``hermes_cli.commands.TARGETS``).
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import NoReturn

from shared.version import version_line

Build = Callable[[argparse.ArgumentParser], object]  # adds arguments; what it returns is ignored

# The reasoning effort levels of the Hermes Agent CLI (``--reasoning``).
REASONING_LEVELS = ("none", "minimal", "low", "medium", "high", "xhigh")
_TOOLSET = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
MAX_TOOLSETS = 64
# The command a line with no command runs when it names a chat to go back to
# (``hermes --resume REF``, ``hermes -c``), as the Hermes Agent CLI does: these flags' dests.
IMPLIED_COMMAND = "chat"
IMPLYING_DESTS = ("resume", "continue_session")

# How long ``hermes logs update --follow`` waits for an update to start when none runs.
FOLLOW_WAIT = 30.0
MAX_FOLLOW_WAIT = 3600.0
# ``hermes logs gateway --lines``: how many of a gateway's last records it prints first.
LOG_LINES = 50
MAX_LOG_LINES = 100_000


def _seconds(limit: float) -> Callable[[str], float]:
    """An argument's type: seconds from 0 to ``limit``."""

    def parse(text: str) -> float:
        try:
            seconds = float(text)
        except ValueError:
            seconds = -1.0
        if not 0.0 <= seconds <= limit:  # also NaN and inf
            raise argparse.ArgumentTypeError(f"expected seconds from 0 to {limit:g}, got {text!r}")
        return seconds

    return parse


UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# ``hermes update --confirm-within``: long enough to start a command, short of forgetting it.
CONFIRM_WITHIN = (5.0, 7 * 86400.0)


def _duration(low: float, high: float) -> Callable[[str], float]:
    """An argument's type: a duration as an operator writes it (90, 90s, 15m, 2h, 1d), in
    seconds from ``low`` to ``high``."""

    def parse(text: str) -> float:
        raw = text.strip().lower()
        number, unit = (raw[:-1], raw[-1]) if raw[-1:] in UNITS else (raw, "s")
        try:
            seconds = float(number) * UNITS[unit]
        except ValueError:
            seconds = -1.0
        if not low <= seconds <= high:  # also NaN and inf
            raise argparse.ArgumentTypeError(
                f"expected a duration from {_written(low)} to {_written(high)} (90, 90s, 15m, 2h, 1d), got {text!r}"
            )
        return seconds

    return parse


def _written(seconds: float) -> str:
    """``seconds`` in the largest unit that writes it whole: 604800 is ``7d``."""
    unit = next(u for u in "dhms" if seconds % UNITS[u] == 0 or u == "s")
    return f"{seconds / UNITS[unit]:g}{unit}"


def _count(limit: int) -> Callable[[str], int]:
    """An argument's type: a whole number from 0 to ``limit``."""

    def parse(text: str) -> int:
        try:
            count = int(text)
        except ValueError:
            count = -1
        if not 0 <= count <= limit:
            raise argparse.ArgumentTypeError(f"expected a whole number from 0 to {limit}, got {text!r}")
        return count

    return parse


def _toolsets(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(","))
    if not 0 < len(names) <= MAX_TOOLSETS or not all(_TOOLSET.fullmatch(name) for name in names):
        raise argparse.ArgumentTypeError(
            f"expected a comma list of up to {MAX_TOOLSETS} toolset names (letters, digits, '_' and '-'), got {text!r}"
        )
    return names


def implied_command(args: argparse.Namespace) -> str | None:
    """The command a parsed line runs: its own words, else ``chat`` when it names a chat to go
    back to (``--resume``, ``-c``), else None (no command)."""
    words = getattr(args, "command_words", None)
    if words is None and any(getattr(args, dest, None) for dest in IMPLYING_DESTS):
        return IMPLIED_COMMAND
    return words


class _VersionAction(argparse.Action):
    """``--version``: an action, not a flag the CLI reads afterwards: it answers while the line
    is parsed, so ``hermes --version`` works whatever follows it, as argparse's own ``--help``
    does. It is part of the grammar so that the parser the matchers read is the very one the
    CLI runs (the CLI answers a leading ``--version`` itself, before building any parser)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):  # noqa: A002 (argparse passes help=)
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_line())
        parser.exit()


# Not a HermesError: argparse's exit (a SystemExit, whose ``code`` is the exit status); the CLI renders it as ``usage_error``.
class UsageError(SystemExit):
    """A command line the grammar refuses: argparse's exit 2, with what argparse prints (the
    parser's ``usage`` line and ``message``), so the CLI can print it as its ``--json`` document."""

    def __init__(self, prog: str, usage: str, message: str) -> None:
        super().__init__(2)
        self.prog, self.usage, self.message = prog, usage, message

    def text(self) -> str:
        return f"{self.usage}{self.prog}: error: {self.message}\n"


_QUIET = contextvars.ContextVar("quiet_usage_errors", default=False)


@contextlib.contextmanager
def quiet_usage_errors() -> Iterator[None]:
    """Within the block a usage error is only raised (UsageError), for the caller to print."""
    token = _QUIET.set(True)
    try:
        yield
    finally:
        _QUIET.reset(token)


# The options every command shares, by dest, which its usage line leaves out.
USAGE_HIDDEN = frozenset({"json"})


class _Formatter(argparse.HelpFormatter):
    """argparse's help, whose usage line leaves out the options every command shares
    (``USAGE_HIDDEN``): a command's usage reads as the Hermes Agent's own, and the options are
    still listed below it."""

    def __init__(self, prog, indent_increment=2, max_help_position=24, width=None):
        # argparse imports shutil (and the compressors it loads) for the width, and every parser
        # built makes a formatter: the width here is shutil.get_terminal_size's, without it.
        width = _terminal_columns() - 2 if width is None else width
        super().__init__(prog, indent_increment, max_help_position, width)

    def add_usage(self, usage, actions, groups, prefix=None):
        super().add_usage(usage, [action for action in actions if action.dest not in USAGE_HIDDEN], groups, prefix)


def _terminal_columns() -> int:
    """``shutil.get_terminal_size().columns``: ``$COLUMNS``, else the terminal's, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0 and sys.__stdout__ is not None:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (ValueError, OSError):  # closed, detached, or not a terminal
            columns = 0
    return columns or 80


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage error is a UsageError: printed as argparse prints it,
    except within ``quiet_usage_errors``; its usage line leaves the shared options out."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        refused = UsageError(self.prog, self.format_usage(), message)
        if not _QUIET.get():
            sys.stderr.write(refused.text())
        raise refused


class _DashValues(_Parser):
    """A command parser whose arguments may start with ``-``, as a Z85 key may
    (``-Sk7...``): a word is an option only when it is one of the command's options exactly
    (or ``--option=value``); argparse would read any other ``-word`` as an unknown option,
    and ``-p...`` as ``-p`` with a value."""

    def _parse_optional(self, arg_string):
        name = arg_string.split("=", 1)[0] if arg_string.startswith("--") else arg_string
        if arg_string.startswith("-") and name not in self._option_string_actions:
            return None  # a positional value
        return super()._parse_optional(arg_string)


class _Pending:
    def __init__(
        self,
        summary: str,
        build: Build,
        parser_class: type[argparse.ArgumentParser] | None = None,
        names: tuple[str, ...] = (),
    ):
        self.summary, self.build, self.parser_class, self.names = summary, build, parser_class, names


class _OnDemand(dict):
    """A sub-command table (name -> parser) that builds each parser on its first lookup."""

    def __init__(self, commands: _Commands):
        super().__init__()
        self._commands = commands

    def __getitem__(self, name):
        entry = super().__getitem__(name)
        return self._commands._build(name, entry) if isinstance(entry, _Pending) else entry

    def get(self, name, default=None):
        return self[name] if name in self else default

    def values(self):
        return [self[name] for name in list(self)]

    def items(self):
        return [(name, self[name]) for name in list(self)]


class _Commands(argparse._SubParsersAction):
    """Sub-commands whose parsers are built when first used. ``add_parser`` still builds one
    at once; ``add_later`` lists the command (its help line) and builds it on demand."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._name_parser_map = self.choices = _OnDemand(self)

    def add_later(
        self,
        name: str,
        summary: str,
        build: Build,
        parser_class: type[argparse.ArgumentParser] | None = None,
        *,
        hidden: bool = False,
        aliases: tuple[str, ...] = (),
    ) -> None:
        """``aliases`` are other names of the command (``rm`` of ``remove``): one parser, listed
        once, as argparse's own aliases are."""
        if not hidden:  # a hidden command parses like any other; only the help leaves it out
            self._choices_actions.append(self._ChoicesPseudoAction(name, aliases, summary))
        pending = _Pending(summary, build, parser_class, (name, *aliases))
        for each in pending.names:
            dict.__setitem__(self._name_parser_map, each, pending)

    def _build(self, name: str, pending: _Pending) -> argparse.ArgumentParser:
        # Made as add_parser makes it, put in the pending one's place (the order of the listing stays).
        parser_class = pending.parser_class or self._parser_class
        parser = parser_class(prog=f"{self._prog_prefix} {pending.names[0]}", description=pending.summary)
        for each in pending.names:
            dict.__setitem__(self._name_parser_map, each, parser)
        pending.build(parser)
        return parser


def _commands(parser: argparse.ArgumentParser, dest: str, metavar: str | None, *, required: bool = True) -> _Commands:
    commands = parser.add_subparsers(action=_Commands, dest=dest, metavar=metavar, required=required)
    assert isinstance(commands, _Commands)
    return commands


def _profile_option(parser: argparse.ArgumentParser, *, top: bool) -> None:
    # Accepted before the command (as the Hermes Agent takes it: ``hermes -p NAME plugins
    # list``) and after it; only the top level has a default, so a subcommand without -p
    # does not overwrite the value given before it, and only the top level's help shows it.
    parser.add_argument(
        "-p",
        "--profile",
        metavar="NAME",
        default=None if top else argparse.SUPPRESS,
        help=(
            "run against this profile's home (default: the root home, or the profile HERMES_HOME points at)"
            if top
            else argparse.SUPPRESS
        ),
    )


def _agent_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    # The Hermes Agent CLI's own flags for a chat. Like -p, accepted before the command and
    # after ``chat``; only the top level has defaults, so one given before is kept.
    def default(value: object) -> object:
        return value if top else argparse.SUPPRESS

    parser.add_argument(
        "-t",
        "--toolsets",
        type=_toolsets,
        metavar="LIST",
        default=default(None),
        help="the toolsets a chat may use, as a comma list (web,terminal,files)",
    )
    parser.add_argument(
        "--reasoning",
        choices=REASONING_LEVELS,
        metavar="LEVEL",
        default=default(None),
        help=f"reasoning effort for a chat's turns: {', '.join(REASONING_LEVELS)}",
    )
    back = parser.add_mutually_exclusive_group()
    back.add_argument(
        "-c",
        "--continue",
        dest="continue_session",
        action="store_true",
        default=default(False),
        help="go back to the most recent chat (with no command: runs chat)",
    )
    back.add_argument(
        "-r",
        "--resume",
        metavar="REF",
        default=default(None),
        help="go back to the chat REF (with no command: runs chat)",
    )
    parser.add_argument(
        "--pass-session-id",
        action="store_true",
        default=default(False),
        help="name the chat's session id in its system prompt (kept with the chat)",
    )
    parser.add_argument(
        "--tui",
        action="store_true",
        default=default(False),
        help="the alternate-screen TUI: refused here (this chat is the classic display)",
    )
    parser.add_argument(
        "--cli",
        action="store_true",
        default=default(False),
        help="the classic display, line by line (the default; wins over --tui)",
    )


def _min_healthy_option(p: argparse.ArgumentParser) -> None:
    from fleet.health import MAX_MIN_HEALTHY, MIN_HEALTHY_SECONDS  # the commands import it anyway

    p.add_argument(
        "--min-healthy",
        type=_seconds(MAX_MIN_HEALTHY),
        metavar="SECONDS",
        help="how long a gateway must have run without a restart to be healthy (default: the update's "
        f"update.min_healthy in config.yaml, else {MIN_HEALTHY_SECONDS:g})",
    )


def _json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")


def _command(
    sub: _Commands,
    words: str,
    summary: str,
    args: Build | None = None,
    *,
    json: bool = True,
    dash_values: bool = False,
    hidden: bool = False,
    own_profile: bool = False,
    aliases: tuple[str, ...] = (),
) -> None:
    """The command ``words`` (``"gateway drain"``, the last word its name); its parser, made
    when the command is used, gets the common options and what ``args`` adds. With
    ``dash_values`` its arguments may start with ``-`` (``_DashValues``); a ``hidden`` one is
    left out of its group's help (a command for other programs, not for people). With
    ``own_profile`` its ``-p/--profile`` is what ``args`` makes it, not the active profile
    (which is then chosen before the command only). ``aliases`` are its other names."""

    def build(parser: argparse.ArgumentParser) -> None:
        if not own_profile:
            _profile_option(parser, top=False)
        if json:
            _json_option(parser)
        parser.set_defaults(command_words=words)
        if args is not None:
            args(parser)

    sub.add_later(
        words.split()[-1], summary, build, _DashValues if dash_values else None, hidden=hidden, aliases=aliases
    )


def _group(sub: _Commands, name: str, summary: str, build: Build) -> None:
    """A command group (``gateway``, ``auth``): ``build`` adds its own sub-commands."""

    def group(parser: argparse.ArgumentParser) -> None:
        _profile_option(parser, top=False)
        build(parser)

    sub.add_later(name, summary, group)


def build_top_level_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="hermes",
        description="Control plane for Hermes gateways, updates and sign-in.",
        epilog="Exit codes: 0 success, 1 failure, 2 usage error or refused, 130 interrupted.",
    )
    parser.add_argument("--version", action=_VersionAction, help="print the version and code commit, then exit")
    _profile_option(parser, top=True)
    parser.add_argument(
        "-m",
        "--model",
        metavar="MODEL",
        default=None,
        help="model for agent turns this command starts (exported as HERMES_MODEL to its processes)",
    )
    _agent_options(parser, top=True)
    commands = _commands(parser, "command", "COMMAND", required=False)
    _group(commands, "profile", "list, create, show and delete profiles", _profile_commands)
    _command(commands, "doctor", "check homes, permissions, IPC endpoints, locks and dependencies")
    _gateway_commands(commands)
    _mesh_commands(commands)
    _update_commands(commands)
    _auth_commands(commands)
    _group(commands, "skin", "the CLI's look: built-in and user skins", _skin_commands)
    _group(commands, "snapshot", "the profiles' quick snapshots: list them, restore lost files", _snapshot_commands)
    _group(commands, "operator", "the operator integration: the plugin, its package and the hooks", _operator_commands)
    _group(
        commands, "plugins", "Install plugins from Git repositories, update, remove, or list them.", _plugins_commands
    )
    _command(commands, "demo", "build a demo install, run its mesh and update it live", _demo_args)
    _command(
        commands,
        "chat",
        "the managed terminal: a line chat with a scripted turn engine (no model)",
        lambda p: _agent_options(p, top=False),
        json=False,
    )
    return parser


def _profile_commands(profile: argparse.ArgumentParser) -> None:
    actions = _commands(profile, "profile_command", "ACTION")
    _command(actions, "profile list", "list every profile of this install")

    def create(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--clone-from",
            metavar="SOURCE",
            help="start with this profile's config.yaml, .env, SOUL.md, skills and memories (default for the root home)",
        )
        p.add_argument("name", metavar="profile_name", help="profile name: ^[a-z0-9][a-z0-9_-]{0,63}$")

    _command(actions, "profile create", "create a profile", create)

    def show(p: argparse.ArgumentParser) -> None:
        p.add_argument("name", metavar="profile_name", nargs="?", help="profile name (default: the active profile)")
        # As the Hermes Agent's usage reads; here a name left out is the active profile's.
        p.usage = "%(prog)s [-h] profile_name"

    _command(actions, "profile show", "show one profile", show)

    def delete(p: argparse.ArgumentParser) -> None:
        p.add_argument("name", metavar="profile_name", help="profile name")
        p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")

    _command(actions, "profile delete", "delete a profile and all its files", delete)

    def rename(p: argparse.ArgumentParser) -> None:
        p.add_argument("old_name", help="the profile to rename")
        p.add_argument("new_name", help="its new name: ^[a-z0-9][a-z0-9_-]{0,63}$")
        # Hidden: the profile a rename acts on is OLD, never the active one.
        p.add_argument("-p", "--profile", metavar="NAME", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    _command(
        actions,
        "profile rename",
        "rename a profile: its home, its gateway's unit and what is owed to it",
        rename,
        own_profile=True,
    )


def _snapshot_commands(snapshot: argparse.ArgumentParser) -> None:
    actions = _commands(snapshot, "snapshot_command", "ACTION")
    _command(
        actions,
        "snapshot list",
        "the quick snapshots kept of every profile, or of one",
        lambda p: p.add_argument("name", nargs="?", metavar="PROFILE", help="profile name (default: every profile)"),
    )

    def restore(p: argparse.ArgumentParser) -> None:
        p.add_argument("name", metavar="PROFILE", help="profile name")
        p.add_argument("--update", metavar="UPDATE_ID", help="the snapshot of this update (default: the newest)")

    _command(actions, "snapshot restore", "put a profile's files back from its snapshot (its gateway stopped)", restore)


def _skin_commands(skin: argparse.ArgumentParser) -> None:
    actions = _commands(skin, "skin_command", "ACTION")
    _command(actions, "skin list", "every skin, built in and in <home>/skins/")
    _command(
        actions,
        "skin show",
        "one skin's colors, glyphs and words",
        lambda p: p.add_argument("name", nargs="?", help="skin name (default: the active one)"),
    )
    _command(
        actions,
        "skin set",
        "use a skin for this profile (display.skin)",
        lambda p: p.add_argument("name", help="skin name"),
    )


def _plugins_commands(plugins: argparse.ArgumentParser) -> None:
    # The Hermes Agent's own verbs and flags, its actions listed as a choice list.
    actions = _commands(plugins, argparse.SUPPRESS, None)

    def install(p: argparse.ArgumentParser) -> None:
        p.add_argument("identifier", help="Git URL, local git repository, or owner/repo shorthand")
        p.add_argument("--force", "-f", action="store_true", help="Remove existing plugin and reinstall")
        enable = p.add_mutually_exclusive_group()
        enable.add_argument("--enable", action="store_true", help="Enable the plugin after install")
        enable.add_argument(
            "--no-enable",
            action="store_true",
            help="Install disabled; enable later with `hermes plugins enable <name>`",
        )

    def listing(p: argparse.ArgumentParser) -> None:
        p.add_argument("--enabled", action="store_true", help="Show only enabled plugins")
        p.add_argument("--user", action="store_true", help="Show only user-installed plugins (including git plugins)")
        p.add_argument("--no-bundled", action="store_true", help="Hide bundled plugins (this CLI bundles none)")
        p.add_argument("--plain", action="store_true", help="Print compact plain-text output instead of a table")

    def enable(p: argparse.ArgumentParser) -> None:
        p.add_argument("name", help="Plugin name (or its key, category/name) to enable")
        grant = p.add_mutually_exclusive_group()
        grant.add_argument(
            "--allow-tool-override",
            dest="allow_tool_override",
            action="store_const",
            const=True,
            default=None,
            help="Grant this plugin permission to replace tools registered before it",
        )
        grant.add_argument(
            "--no-allow-tool-override",
            dest="allow_tool_override",
            action="store_const",
            const=False,
            help="Enable without granting tool override",
        )

    def named(what: str) -> Build:
        return lambda p: p.add_argument("name", help=what)

    _command(actions, "plugins install", "Install a plugin from a Git URL or a local git repository", install)
    _command(actions, "plugins update", "Pull latest changes for an installed plugin", named("Plugin name to update"))
    _command(
        actions,
        "plugins remove",
        "Remove an installed plugin",
        named("Plugin name to remove"),
        aliases=("rm", "uninstall"),
    )
    _command(actions, "plugins list", "List installed plugins", listing, aliases=("ls",))
    _command(actions, "plugins enable", "Enable a disabled plugin", enable)
    _command(actions, "plugins disable", "Disable a plugin without removing it", named("Plugin name to disable"))


# The integration's policy bounds: raw strings, appended, so a repeated flag or ``1e3`` is the
# typed policy error the installer gives rather than a parser message.
OPERATOR_BOUNDS = (
    ("--tool-timeout-ms", "tool_timeout_ms", "one tool call's limit, at most 60000"),
    ("--request-timeout-ms", "request_timeout_ms", "a start's daemon wait, below the tool timeout (45000)"),
    ("--max-output-bytes", "max_output_bytes", "one tool result, at most 1048576"),
    ("--max-screen-bytes", "max_screen_bytes", "one rendered screen, at most 262144"),
    ("--max-concurrency", "max_concurrency", "concurrent tool calls, at most 8"),
)
OPERATOR_AGENTS = ("hermes", "codex", "claude")
ACCESS_MODES = ("read_only", "manage", "full")


def _operator_target(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agent", choices=OPERATOR_AGENTS, default="hermes", help="the agent (only hermes is served)")
    # One of the two, never both: the installer refuses both with its typed target error.
    p.add_argument("--hermes-profile", metavar="NAME", help="a profile of this install (default included)")
    p.add_argument("--hermes-home", metavar="ABS", help="a custom absolute, owner-private Hermes home")
    p.add_argument("--hermes-bin", metavar="ABS", help="the target Hermes executable (default: this install's)")


def _operator_policy(p: argparse.ArgumentParser) -> None:
    p.add_argument("--access-mode", choices=ACCESS_MODES, help="which tools the plugin registers")
    p.add_argument("--allow-host", action="append", metavar="HOST", help="a host the tools may reach (repeat)")
    p.add_argument("--confirm-wildcard", action="store_true", help="confirm --allow-host '*'")
    p.add_argument(
        "--operator-cli",
        metavar="ABS",
        help="the operator CLI the plugin runs (default: this install's hermes-operator)",
    )
    for flag, dest, what in OPERATOR_BOUNDS:
        p.add_argument(flag, dest=dest, action="append", metavar="N", help=what)


def _operator_commands(operator: argparse.ArgumentParser) -> None:
    actions = _commands(operator, "operator_command", "ACTION")

    def install(p: argparse.ArgumentParser) -> None:
        _operator_target(p)
        _operator_policy(p)

    def update(p: argparse.ArgumentParser) -> None:
        install(p)
        p.add_argument("--confirm-modified", action="store_true", help="replace a modified install")

    def uninstall(p: argparse.ArgumentParser) -> None:
        _operator_target(p)
        p.add_argument("--confirm-modified", action="store_true", help="remove a modified install")

    _command(actions, "operator install", "install the operator plugin into a Hermes home", install)
    _command(actions, "operator update", "rewrite the plugin from the selected package", update)
    _command(actions, "operator status", "what is installed in a Hermes home (read-only)", _operator_target)
    _command(
        actions,
        "operator doctor",
        "typed checks of an install; with no target, a dry run of the hooks",
        _operator_target,
    )
    _command(actions, "operator uninstall", "remove the managed plugin and its policy", uninstall)
    _group(actions, "package", "the runtime package registry", _package_commands)


def _package_commands(package: argparse.ArgumentParser) -> None:
    actions = _commands(package, "package_command", "ACTION")

    def install(p: argparse.ArgumentParser) -> None:
        p.add_argument("archive", metavar="ARCHIVE", help="a runtime package (.tar.zst)")
        p.add_argument("--catalog", metavar="CATALOG", required=True, help="the signed catalog that authorizes it")

    def selector(p: argparse.ArgumentParser) -> None:
        p.add_argument("package_id", metavar="ID", help="the package id (pohunek.runtime.hermes)")
        which = p.add_mutually_exclusive_group()
        which.add_argument("--version", dest="package_version", metavar="V", help="this version")
        which.add_argument("--digest", metavar="D", help="this archive digest (sha256:<hex>)")

    _command(actions, "operator package install", "verify a package against its catalog and install it", install)
    _command(actions, "operator package list", "the installed packages, enabled and selected")
    for verb, what in (
        ("enable", "let a package be selected"),
        ("disable", "retire a package for new installs"),
        ("select", "the version installs use"),
        ("uninstall", "remove a package"),
    ):
        _command(actions, f"operator package {verb}", what, selector)
    _command(actions, "operator package doctor", "verify every package root and the registry")


def _demo_args(demo: argparse.ArgumentParser) -> None:
    demo.add_argument("--home", metavar="DIR", help="where to build the demo (default: a new temporary directory)")
    demo.add_argument("--keep", action="store_true", help="leave the demo mesh running and its home in place")


def _gateway_commands(commands: _Commands) -> None:
    _group(commands, "gateway", "run, inspect and manage the per-profile gateways", _gateway_actions)


def _gateway_actions(gateway: argparse.ArgumentParser) -> None:
    # Bare ``hermes gateway`` runs the gateway, as the process matchers expect.
    gateway.set_defaults(command_words="gateway")
    actions = _commands(gateway, "gateway_command", "ACTION", required=False)

    def run(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--create-profile",
            action="store_true",
            help="make the served (named) profiles' homes first when they have none, as `profile create` does",
        )
        p.add_argument(
            "--serve",
            metavar="A,B,...",
            help="serve these profiles of the install from this one process (a multiplex gateway)",
        )

    _command(actions, "gateway run", "run the active profile's gateway in the foreground", run, json=False)

    def status(p: argparse.ArgumentParser) -> None:
        _min_healthy_option(p)
        p.add_argument("--watch", action="store_true", help="stay and show every change live (as `hermes mesh top`)")

    _command(actions, "gateway status", "every live gateway of this install, and its health", status)

    def health(p: argparse.ArgumentParser) -> None:
        _health_options(p)

    _command(actions, "gateway health", "the active profile's gateway serves a probe turn now (exit 0), or not", health)
    _command(actions, "gateway list", "every profile, with or without a gateway")

    def drain(p: argparse.ArgumentParser) -> None:
        p.add_argument("--deadline", type=float, default=30.0, metavar="SECONDS", help="how long turns may finish")
        p.add_argument("--stay", action="store_true", help="keep the gateway running after the drain")

    _command(actions, "gateway drain", "drain the active profile's gateway", drain)

    def install(p: argparse.ArgumentParser) -> None:
        p.add_argument("--supervisor", required=True, choices=("supervisord", "systemd", "launchd"))
        p.add_argument("--scope", choices=("user", "system"), default="user", help="systemd/launchd scope")
        # A string: a bad value is the install's typed error, which names the field.
        p.add_argument(
            "--watchdog",
            metavar="SECONDS",
            help="systemd: restart a gateway whose loop hangs this long (default 30; 0: off)",
        )

    _command(
        actions,
        "gateway install",
        "write the supervisor unit for the active profile's gateway",
        install,
    )
    for action in ("start", "stop", "restart"):
        _command(
            actions, f"gateway {action}", f"{action} the active profile's gateway through the supervisor that owns it"
        )


def _health_options(p: argparse.ArgumentParser) -> None:
    """A health check's options, one for every service it checks."""
    from fleet.hang import MAX_FAILURES
    from fleet.health_probe import PROBE_TIMEOUT

    p.add_argument(
        "--timeout",
        type=_seconds(60.0),
        default=PROBE_TIMEOUT,
        metavar="SECONDS",
        help=f"how long it has to answer (default {PROBE_TIMEOUT:g})",
    )
    p.add_argument(
        "--kill-after",
        type=_count(MAX_FAILURES),
        default=0,
        metavar="N",
        help="SIGKILL its process after N failed checks in a row, for its supervisor to restart it (default 0: never)",
    )


def _update_commands(commands: _Commands) -> None:
    def update(p: argparse.ArgumentParser) -> None:
        p.add_argument("--plan", action="store_true", help="print what an update would do; change nothing")
        p.add_argument("--check", action="store_true", help="say whether an update is available; change nothing")
        backup = p.add_mutually_exclusive_group()
        backup.add_argument("--backup", action="store_true", help="also archive the whole root home for rollback")
        backup.add_argument("--no-backup", action="store_true", help="take no snapshot and no backup")
        p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
        p.add_argument("--branch", metavar="NAME", help="branch to update to (default: the current one)")
        p.add_argument(
            "--no-canary",
            action="store_true",
            help="no canary before the tree moves and no health gates after it (update.canary in config.yaml)",
        )
        p.add_argument(
            "--take-held",
            action="store_true",
            help="update to origin's commit even though an earlier update's health gate rolled it back",
        )
        from fleet.health import MAX_PARALLEL

        p.add_argument(
            "--max-parallel",
            type=_count(MAX_PARALLEL),
            metavar="N",
            help="gateways restarted per health-gated wave; 0: all at once (update.max_parallel in config.yaml)",
        )
        move = p.add_mutually_exclusive_group()
        move.add_argument(
            "--rollback",
            nargs="?",
            const="",
            metavar="UPDATE_ID",
            help="go back to where an update started (default: the newest that moved the code)",
        )
        move.add_argument(
            "--confirm-within",
            type=_duration(*CONFIRM_WITHIN),
            metavar="DURATION",
            help="roll back by itself unless `hermes update --confirm` comes within DURATION (90s, 15m, 2h)",
        )
        move.add_argument(
            "--confirm", action="store_true", help="keep the update that waits for its confirm; change nothing else"
        )

    _command(
        commands,
        "update",
        "update this install and move every gateway onto the new code",
        update,
    )

    def update_logs(p: argparse.ArgumentParser) -> None:
        p.add_argument("--all", action="store_true", help="every kept receipt, newest first")
        p.add_argument("--follow", action="store_true", help="follow the update in progress, or the next to start")
        p.add_argument(
            "--wait",
            type=_seconds(MAX_FOLLOW_WAIT),
            default=FOLLOW_WAIT,
            metavar="SECONDS",
            help=f"with --follow: how long to wait for an update to start (default {FOLLOW_WAIT:g})",
        )

    def logs(group: argparse.ArgumentParser) -> None:
        kinds = _commands(group, "logs_command", "KIND")
        _command(kinds, "logs update", "the update receipts (root home)", update_logs)
        _command(kinds, "logs gateway", "the active profile's gateway log, whichever supervisor runs it", _gateway_logs)

    _group(commands, "logs", "what happened: update receipts and gateway logs", logs)


def _gateway_logs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--follow", action="store_true", help="keep printing new records until Ctrl-C")
    p.add_argument(
        "--lines",
        type=_count(MAX_LOG_LINES),
        default=LOG_LINES,
        metavar="N",
        help=f"how many of the last records to print first (default {LOG_LINES})",
    )


def _auth_commands(commands: _Commands) -> None:
    _group(commands, "auth", "sign in to a provider, and see or end the sign-in", _auth_actions)


def _auth_actions(auth: argparse.ArgumentParser) -> None:
    actions = _commands(auth, "auth_command", "ACTION")

    def provider(help: str, also: Build | None = None) -> Build:  # noqa: A002 (argparse's word)
        def build(p: argparse.ArgumentParser) -> None:
            p.add_argument("provider", choices=("nous",), help=help)
            if also is not None:
                also(p)

        return build

    def login(p: argparse.ArgumentParser) -> None:
        p.add_argument("--replace", action="store_true", help="sign in again even when already signed in")
        p.add_argument("--no-browser", action="store_true", help="do not open the sign-in page in a browser")
        p.add_argument(
            "--host", metavar="NAME", help="sign in the install of another host this home sees, on its auth worker"
        )

    _command(
        actions,
        "auth login",
        "sign in with a device code (JSON lines with --json)",
        provider("the provider to sign in to", login),
    )
    _command(
        actions,
        "auth status",
        "whether and as whom this install, and every other host it sees, is signed in",
        provider("the provider"),
    )
    _command(actions, "auth guest", "start the free tier as a guest (apps move on sign-in)", provider("the provider"))
    _command(actions, "auth logout", "forget this install's sign-in", provider("the provider"))


def _mesh_commands(commands: _Commands) -> None:
    _group(commands, "mesh", "the embedded supervisor: one gateway per profile", _mesh_actions)


def _mesh_actions(mesh: argparse.ArgumentParser) -> None:
    actions = _commands(mesh, "mesh_command", "ACTION")

    def up(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--profiles", metavar="A,B,...", help="profiles to run a gateway each for (default: all not served)"
        )
        p.add_argument(
            "--serve", metavar="A,B,...", help="profiles to serve from one multiplex gateway (program hermes-multiplex)"
        )
        form = p.add_mutually_exclusive_group()
        form.add_argument(
            "--host",
            action="store_true",
            help="fork the gateways from one gateway host (program hermes-gateway-host): a restart costs one"
            " import; the default on Linux",
        )
        form.add_argument(
            "--programs",
            action="store_true",
            help="run each gateway as a supervisord program of its own (program hermes-gateway-<profile>);"
            " the default elsewhere",
        )

    _command(actions, "mesh up", "start the mesh (supervisord and its gateways)", up)
    _command(actions, "mesh down", "stop the mesh; nothing is left running")
    _command(actions, "mesh status", "the mesh's supervisor and its programs")

    def top(p: argparse.ArgumentParser) -> None:
        _min_healthy_option(p)

    _command(actions, "mesh top", "every gateway of the install and its hosts, live (--json: a line per change)", top)

    def metrics(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--listen",
            metavar="ADDRESS",
            help="serve GET /metrics until stopped, at a loopback HOST:PORT or unix:/PATH (never another host's:"
            " the metrics are served unauthenticated)",
        )

    _command(actions, "mesh metrics", "the install's metrics, as OpenMetrics text for Prometheus", metrics)

    def health(p: argparse.ArgumentParser) -> None:
        from shared.spawn import WORKERS

        p.add_argument("service", choices=(*WORKERS, "gateway_host"), help="the install-wide service to ask")
        _health_options(p)

    _command(actions, "mesh health", "an install-wide service answers a hello now (exit 0), or not", health)
    _command(actions, "mesh hosts", "the other hosts this home sees: address, services, keys")
    _group(actions, "keys", "the CURVE keys of TCP endpoints (public keys only are shown)", _mesh_keys_actions)


def _mesh_keys_actions(keys: argparse.ArgumentParser) -> None:
    actions = _commands(keys, "keys_command", "ACTION")

    def init(p: argparse.ArgumentParser) -> None:
        # Keys are the root home's whichever profile is active: here a profile names a gateway to key.
        p.add_argument(
            "-p",
            "--profile",
            dest="profiles",
            metavar="NAME",
            action="append",
            default=[],
            help="also key this profile's gateway, whether or not its home is here (repeatable)",
        )

    def show(p: argparse.ArgumentParser) -> None:
        p.add_argument("--client", action="store_true", help="only this install's client public key")

    _command(actions, "mesh keys init", "create the keys that are missing (never overwrites)", init, own_profile=True)
    _command(actions, "mesh keys show", "this install's public keys and the keys it accepts and trusts", show)

    def authorize(p: argparse.ArgumentParser) -> None:
        p.add_argument("name", nargs="?", help="a name for the key (a-z, 0-9, '_', '-'; a server's: SERVICE[@PROFILE])")
        p.add_argument("key", nargs="?", help="the public key: 40 characters of Z85 (it may start with '-')")
        p.add_argument("--server", action="store_true", help="a server's public key that clients trust")
        p.add_argument(
            "--from",
            dest="source",
            metavar="FILE",
            help="with --server: trust every service key of another install's `mesh keys show --json` (- for stdin)",
        )
        p.add_argument(
            "--grant",
            dest="grants",
            metavar="SERVICE.OP",
            action="append",
            default=[],
            help="let the key call this op (gateway.drain, say; repeatable); the key's grants are exactly these",
        )

    def revoke(p: argparse.ArgumentParser) -> None:
        p.add_argument("name", help="the key's name")
        p.add_argument("--server", action="store_true", help="a trusted server's key")

    def rotate(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--service", metavar="NAME", action="append", default=[], help="a service's keypair (SERVICE[@PROFILE])"
        )
        p.add_argument("--client", action="store_true", help="the client keypair (the default without --service)")
        p.add_argument(
            "--grace",
            type=float,
            metavar="SECONDS",
            help="how long the old keys are still accepted: a client key, or a service key's connections (default 5)",
        )

    _command(
        actions,
        "mesh keys authorize",
        "accept a client's public key (or, with --server, trust a server's)",
        authorize,
        dash_values=True,  # a Z85 key may start with "-"
    )
    _command(actions, "mesh keys revoke", "stop accepting a client's key (or trusting a server's)", revoke)
    _command(actions, "mesh keys rotate", "replace the client keypair, or a service's", rotate)

    def import_(p: argparse.ArgumentParser) -> None:
        p.add_argument("source", metavar="FILE", help="the host's `hermes mesh keys show --json` (- for stdin)")
        p.add_argument("--host", required=True, metavar="NAME", help="the name this home gives that host")
        p.add_argument("--address", metavar="ADDRESS", help="where its services are reached (needed for a new host)")

    def forget(p: argparse.ArgumentParser) -> None:
        p.add_argument("service", nargs="?", metavar="SERVICE", help="one service's key and port (default: the host)")
        p.add_argument("--host", required=True, metavar="NAME", help="the host")

    _command(
        actions, "mesh keys import", "trust another host's services: add its keys and address, never replace", import_
    )
    _command(actions, "mesh keys forget", "stop trusting another host's service, or the whole host", forget)

    def export(p: argparse.ArgumentParser) -> None:
        p.add_argument("--service", required=True, metavar="NAME", help="the service (SERVICE[@PROFILE])")
        p.add_argument("--to", required=True, metavar="DIR", help="an empty or missing directory: the service's store")

    _command(actions, "mesh keys export", "write one service's own keys alone, for where it runs", export)
