"""``hermes``: parse, apply the profile, dispatch, map errors to exit codes, and warn while
gateways are owed a restart onto new code.

Exit codes: 0 success, 1 failure, 2 usage error or refused, 130 interrupted.

A fleet that runs mixed code must never look healthy, so while an update owes gateways a
restart every command ends with one warning line on stderr (stdout, and so ``--json``, stays
the command's own). Two commands do not print it: ``hermes update``, which retries what is
owed and reports what is still owed itself, and the foreground gateway, whose stderr is a
service's log. The check is one small file read (``services.updater.obligations``).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_REFUSED = 2
EXIT_INTERRUPTED = 130
# Commands that report owed restarts themselves, or whose stderr is a log.
NO_RESTART_WARNING = frozenset({"hermes_cli.commands.update:cmd_update", "hermes_cli.commands.gateway:cmd_run"})


def apply_profile(profile: str | None, model: str | None) -> None:
    """Point ``HERMES_HOME`` at the chosen profile before anything reads a home, so this
    process and every process it starts work on that profile."""
    from shared import homes

    if model:
        os.environ["HERMES_MODEL"] = model
    if profile is None:
        return
    home = homes.profile_home(profile, homes.root_home(), must_exist=True)
    os.environ[homes.HOME_ENV] = str(home)


def _load(target: str) -> Callable[..., int | None]:
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)


def warn_owed_restarts() -> None:
    from services.updater import restart_warning

    line = restart_warning()
    if line:
        print(line, file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--version"]:  # the commonest probe of all answers before any parser is built
        from shared.version import version_line

        print(version_line())
        warn_owed_restarts()
        return EXIT_OK
    from hermes_cli.commands import TARGETS
    from shared.cli_grammar import build_top_level_parser  # its command parsers are built as parsing needs them

    parser = build_top_level_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit:  # --version, --help or a usage error: the parser has answered
        warn_owed_restarts()
        raise
    words = getattr(args, "command_words", None)  # None: no command was given
    target = None if words is None else TARGETS.get(words)
    try:
        return _dispatch(parser, args, target)
    finally:
        if target not in NO_RESTART_WARNING:
            warn_owed_restarts()


def _dispatch(parser, args, target: str | None) -> int:
    if target is None:
        parser.print_help(sys.stderr)
        return EXIT_REFUSED
    from hermes_cli import output
    from shared.errors import HermesError

    try:
        apply_profile(args.profile, args.model)
        return _load(target)(args) or EXIT_OK
    except HermesError as exc:
        return output.error(args, exc)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
