"""``hermes``: parse, apply the profile, dispatch, map errors to exit codes, and warn while
gateways are owed a restart onto new code.

Exit codes (``shared.exit_codes``): 0 success, 1 failure, 2 usage error or refused, 130
interrupted, 141 stdout closed (a reader such as ``head`` went away: the command stops
quietly, with the code a shell gives a writer killed by SIGPIPE, so a ``pipefail`` script
still sees the output was cut).

SIGTERM interrupts a command as Ctrl-C does (its clean-up runs, exit 130), so a supervisor or
a timeout that stops ``hermes demo`` leaves nothing running; a SIGTERM during the clean-up is
ignored (SIGKILL still ends it). The foreground gateway handles its signals itself;
``--version``, a few file reads with nothing to clean up, keeps the default (SIGTERM ends it).

No command prints a traceback: an unexpected error is one line naming the command, what failed
and where the detail was logged (``hermes_cli.crash``), exit 1.

A fleet that runs mixed code must never look healthy, so while an update owes gateways a
restart every command ends with one warning line on stderr (stdout, and so ``--json``, stays
the command's own). Two commands do not print it: ``hermes update``, which retries what is
owed and reports what is still owed itself, and the foreground gateway, whose stderr is a
service's log. The check is one small file read (``services.updater.obligations``).

While an update waits for its confirm, every command but the foreground gateway says so too,
and starts the rollback once the deadline has passed, or a timer when none lives: a command
is one of the confirm's timers (``services.updater.confirm_timer``). One ``stat`` where none waits.
"""

from __future__ import annotations

import os
import sys

from shared import exit_codes

TYPE_CHECKING = False  # typing's own flag without importing typing; mypy reads it as true
if TYPE_CHECKING:
    from collections.abc import Callable

    from fleet.cli_grammar import UsageError

# Commands that report owed restarts themselves, or whose stderr is a log.
FOREGROUND_GATEWAY = "hermes_cli.commands.gateway:cmd_run"
NO_RESTART_WARNING = frozenset({"hermes_cli.commands.update:cmd_update", FOREGROUND_GATEWAY})


def apply_profile(profile: str | None, model: str | None, *, creates: bool = False) -> None:
    """Point ``HERMES_HOME`` at the chosen profile before anything reads a home, so this
    process and every process it starts work on that profile. It must exist unless the
    command ``creates`` it (``gateway run --create-profile``)."""
    from shared import homes

    if model:
        os.environ["HERMES_MODEL"] = model
    if profile is None:
        return
    home = homes.profile_home(profile, homes.root_home(), must_exist=not creates)
    os.environ[homes.HOME_ENV] = str(home)


def _load(target: str) -> Callable[..., int | None]:
    import importlib

    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)


def warn_owed_restarts() -> None:
    from services.updater import restart_warning

    line = restart_warning()
    if line:
        print(line, file=sys.stderr)
    settle_confirm()


def settle_confirm() -> None:
    """While an update waits for its confirm: say so, start its rollback once the deadline has
    passed, or a timer when none lives (``services.updater.confirm_timer``). One ``stat`` else."""
    from services.updater import confirm_owed

    if not confirm_owed():
        return
    from services.updater import settle_confirm as settle
    from shared import homes

    line = settle(homes.root_home())
    if line:
        print(line, file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    run = _Run()
    if _asks_version(argv):
        # A few file reads with nothing to clean up: no SIGTERM handler, whose module (it
        # loads enum) would cost more than the answer.
        return _guarded(argv, run)
    import signal

    try:
        previous = signal.signal(signal.SIGTERM, _interrupt)
    except ValueError:  # not the main thread (an in-process caller): its signals are not ours
        return _guarded(argv, run)
    try:
        return _guarded(argv, run)
    finally:
        signal.signal(signal.SIGTERM, previous)  # an in-process caller gets its own back


def _guarded(argv: list[str], run: _Run) -> int:
    try:
        try:
            code = _main(argv, run)
        except SystemExit:  # the parser answered (--help, --version): its output is flushed here too
            _flush_stdout()
            raise
        _flush_stdout()
        return code
    except BrokenPipeError as exc:
        if not _stdout_closed():
            return _unexpected(run, exc)
        _silence_stdout()
        return exit_codes.STDOUT_CLOSED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return exit_codes.INTERRUPTED
    except Exception as exc:  # the one place an error nobody expected ends: one line, no traceback
        return _unexpected(run, exc)


def _interrupt(signum, frame) -> None:
    import signal

    # Once: a stop often comes twice at once (``timeout`` signals the process and its group),
    # and the second must not cut the clean-up short. A handler, not SIG_IGN, which children inherit.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    raise KeyboardInterrupt


class _Run:
    """What is known of this run when it fails: the parsed arguments and the command's words."""

    args: object = None
    command = "start-up"  # before the parser has named a command


def _unexpected(run: _Run, exc: BaseException) -> int:
    from hermes_cli import crash, output

    error = crash.report(run.command, exc)
    try:
        output.error(run.args, error)
    except BrokenPipeError:
        _silence_stdout()
    return exit_codes.FAILED


def _flush_stdout() -> None:
    # A reader that went away is found here, where it is caught, not at interpreter exit.
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        _silence_stdout()
        raise SystemExit(exit_codes.STDOUT_CLOSED) from None


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (its write end polls as an error)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError):  # no stdout at all
        return True


def _silence_stdout() -> None:
    # What is still buffered goes nowhere, so the interpreter's own flush at exit cannot fail.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _main(argv: list[str], run: _Run) -> int:
    if _asks_version(argv):  # the commonest probe of all answers before any parser is built
        _print_version(json_document="--json" in argv)
        warn_owed_restarts()
        return exit_codes.OK
    from fleet import cli_grammar  # parsers built as parsing needs them
    from hermes_cli.commands import TARGETS

    parser = cli_grammar.build_top_level_parser()
    try:
        with cli_grammar.quiet_usage_errors():
            args = parser.parse_args(argv)
    except cli_grammar.UsageError as refused:
        warn_owed_restarts()
        return _usage_error(argv, refused)
    except SystemExit:  # --version or --help: the parser has answered
        warn_owed_restarts()
        raise
    run.args = args
    words = cli_grammar.implied_command(args)  # None: no command was given
    run.command = words or run.command
    target = None if words is None else TARGETS.get(words)
    try:
        return _dispatch(parser, args, target)
    finally:
        if target not in NO_RESTART_WARNING:
            warn_owed_restarts()
        elif target != FOREGROUND_GATEWAY:
            settle_confirm()


def _asks_version(argv: list[str]) -> bool:
    return argv[:1] == ["--version"]


def _print_version(*, json_document: bool) -> None:
    """The version line, or with ``--json`` its fields as one document."""
    from shared import version

    if json_document:
        import json

        print(json.dumps(version.version_document(), indent=2))
    else:
        print(version.version_line())


def _usage_error(argv: list[str], refused: UsageError) -> int:
    """A command line the grammar refuses: argparse's text on stderr, or with ``--json`` one
    JSON error document (``usage_error``) on stdout, as every other refusal."""
    from types import SimpleNamespace

    from hermes_cli import output

    words = argv[: argv.index("--")] if "--" in argv else argv
    if "--json" not in words:
        sys.stderr.write(refused.text())
        return exit_codes.REFUSED
    return output.error(SimpleNamespace(json=True), output.UsageRefused(f"{refused.prog}: {refused.message}"))


def _finish_interrupted_rename() -> None:
    """A profile rename a kill interrupted is finished (or undone) before any command reads a home."""
    from hermes_cli.profile_rename import journal_path
    from shared import homes

    root = homes.root_home()
    if os.path.lexists(journal_path(root)):
        from hermes_cli.commands.profile_rename import warn_of_interrupted_rename

        warn_of_interrupted_rename(root)


def _dispatch(parser, args, target: str | None) -> int:
    if target is None:
        parser.print_help(sys.stderr)
        return exit_codes.REFUSED
    from hermes_cli import output
    from shared.errors import HermesError

    try:
        _finish_interrupted_rename()
        apply_profile(args.profile, args.model, creates=getattr(args, "create_profile", False))
        return _load(target)(args) or exit_codes.OK
    except HermesError as exc:
        return output.error(args, exc)


if __name__ == "__main__":
    sys.exit(main())
