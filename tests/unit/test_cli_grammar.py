"""The CLI grammar: every command has one target, every target is a function, and a command
parses to its own words."""

from __future__ import annotations

import argparse
import importlib

import pytest

from fleet.cli_grammar import FOLLOW_WAIT, MAX_FOLLOW_WAIT, build_top_level_parser, implied_command
from hermes_cli.commands import TARGETS


def grammar_commands(parser: argparse.ArgumentParser) -> set[str]:
    """The words of every command the parser accepts (a parser that sets ``command_words``)."""
    found = {parser.get_default("command_words")} - {None}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found |= grammar_commands(child)
    return found


def test_every_command_of_the_grammar_has_one_target_and_no_target_is_left_over():
    assert grammar_commands(build_top_level_parser()) == set(TARGETS)


@pytest.mark.parametrize("words", sorted(TARGETS))
def test_each_target_names_a_function(words):
    module, _, function = TARGETS[words].partition(":")
    assert callable(getattr(importlib.import_module(module), function))


def test_a_command_parses_to_its_own_words():
    parser = build_top_level_parser()
    assert parser.parse_args(["gateway", "drain", "--stay"]).command_words == "gateway drain"
    assert parser.parse_args(["-p", "x", "gateway"]).command_words == "gateway"
    assert parser.parse_args(["logs", "update", "--all"]).command_words == "logs update"
    assert getattr(parser.parse_args([]), "command_words", None) is None


def built(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """The command paths whose parsers exist now, found without building any more of them."""
    found = {words}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in dict.items(action.choices):  # the raw table: no lookup, no build
                if isinstance(child, argparse.ArgumentParser):
                    found |= built(child, (*words, name))
    return found


def test_parsing_a_command_builds_only_the_parsers_on_its_way():
    parser = build_top_level_parser()
    assert built(parser) == {()}
    assert parser.parse_args(["-p", "x", "gateway", "status", "--json"]).command_words == "gateway status"
    assert built(parser) == {(), ("gateway",), ("gateway", "status")}
    assert parser.parse_args(["doctor"]).command_words == "doctor"
    assert built(parser) == {(), ("gateway",), ("gateway", "status"), ("doctor",)}


def test_help_lists_every_command_without_building_one(capsys):
    parser = build_top_level_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    listing = capsys.readouterr().out
    assert all(name in listing for name in ("profile", "doctor", "gateway", "mesh", "update", "auth", "demo"))
    assert built(parser) == {()}


def test_an_unknown_command_is_a_usage_error_naming_the_choices(capsys):
    with pytest.raises(SystemExit) as exited:
        build_top_level_parser().parse_args(["gateway", "bogus"])
    assert exited.value.code == 2
    assert "invalid choice: 'bogus'" in capsys.readouterr().err


def test_the_follow_wait_is_bounded_seconds(capsys):
    parser = build_top_level_parser()
    assert parser.parse_args(["logs", "update", "--follow"]).wait == FOLLOW_WAIT
    assert parser.parse_args(["logs", "update", "--follow", "--wait", "0"]).wait == 0.0
    for bad in ("-1", "nan", "inf", "soon", str(MAX_FOLLOW_WAIT + 1)):
        with pytest.raises(SystemExit) as exited:
            parser.parse_args(["logs", "update", "--follow", "--wait", bad])
        assert exited.value.code == 2
        assert "--wait: expected seconds from 0 to 3600" in capsys.readouterr().err


@pytest.mark.parametrize(
    "key",
    [
        "-9:atZ#@^H1bQ?!NtjJq8G%q.UO=COFAB%KnB[.H",  # a real key made by zmq
        "-p" + "a" * 38,  # not -p with a value
        "-h" + "a" * 38,  # not --help
        "--" + "a" * 38,
    ],
)
def test_a_public_key_that_starts_with_a_dash_is_the_key(key):
    parser = build_top_level_parser()
    for argv in (
        ["mesh", "keys", "authorize", "laptop", key],
        ["mesh", "keys", "authorize", "--server", "laptop", key, "--json", "-p", "coder"],
    ):
        args = parser.parse_args(argv)
        assert (args.name, args.key) == ("laptop", key)
    assert (args.server, args.json, args.profile) == (True, True, "coder")


def test_an_unknown_option_of_authorize_is_still_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        build_top_level_parser().parse_args(["mesh", "keys", "authorize", "laptop", "KEY", "--frobnicate"])
    assert info.value.code == 2


# --- the Hermes Agent CLI's chat flags -------------------------------------------------------


def test_the_chat_flags_parse_before_the_command_and_after_chat():
    parser = build_top_level_parser()
    args = parser.parse_args(["-t", "web, files", "--reasoning", "high", "-p", "work", "--resume", "R1", "chat"])
    assert (args.toolsets, args.reasoning, args.profile, args.resume) == (("web", "files"), "high", "work", "R1")
    assert args.command_words == "chat" and args.continue_session is False
    after = parser.parse_args(["chat", "-c", "--reasoning", "low", "-t", "browser"])
    assert (after.continue_session, after.reasoning, after.toolsets, after.resume) == (True, "low", ("browser",), None)
    kept = parser.parse_args(["--resume", "R2", "-t", "web", "chat"])  # chat's own defaults do not overwrite them
    assert (kept.resume, kept.toolsets) == ("R2", ("web",))
    defaults = parser.parse_args(["doctor"])
    assert (defaults.toolsets, defaults.reasoning, defaults.resume, defaults.continue_session) == (
        None,
        None,
        None,
        False,
    )


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--resume", "R"], "chat"),
        (["-r", "R"], "chat"),
        (["-c"], "chat"),
        (["--continue", "-p", "work"], "chat"),
        (["-c", "doctor"], "doctor"),  # a command given is the command run
        (["--reasoning", "high"], None),
        (["-t", "web"], None),
        ([], None),
    ],
)
def test_a_chat_to_go_back_to_and_no_command_means_chat(argv, words):
    assert implied_command(build_top_level_parser().parse_args(argv)) == words


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--reasoning", "extreme", "chat"], "--reasoning: invalid choice: 'extreme'"),
        (["--reasoning", "HIGH", "chat"], "--reasoning: invalid choice: 'HIGH'"),
        (["chat", "--reasoning", ""], "--reasoning: invalid choice: ''"),
        (["-t", "", "chat"], "-t/--toolsets: expected a comma list"),
        (["-t", "web,,files", "chat"], "-t/--toolsets: expected a comma list"),
        (["-t", "web files", "chat"], "-t/--toolsets: expected a comma list"),
        (["-t", "../etc", "chat"], "-t/--toolsets: expected a comma list"),
        (["-t", ",".join(["a"] * 65), "chat"], "-t/--toolsets: expected a comma list"),
        (["--toolsets", "x" * 65, "chat"], "-t/--toolsets: expected a comma list"),
        (["--resume", "R", "-c"], "not allowed with argument"),
        (["chat", "-c", "--resume", "R"], "not allowed with argument"),
        (["--resume"], "expected one argument"),
    ],
)
def test_bad_chat_flags_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        build_top_level_parser().parse_args(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def command_parsers(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """(words, parser) of every command and group under ``parser``, by its own name (an alias,
    as ``plugins rm``, is the same parser)."""
    found = [(words, parser)] if words else []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                if child.prog.rsplit(" ", 1)[-1] == name:
                    found += command_parsers(child, (*words, name))
    return found


def filled(parser: argparse.ArgumentParser) -> list[str]:
    """Values for the command's required arguments: a choice's first, else a plain word."""
    argv: list[str] = []
    for action in parser._actions:
        positional = not action.option_strings
        if isinstance(action, argparse._SubParsersAction) or not (action.required or positional):
            continue
        if positional and action.nargs in ("?", "*"):
            continue
        value = str(next(iter(action.choices))) if action.choices else "x"
        argv += [value] if positional else [action.option_strings[-1], value]
    return argv


def test_the_profile_before_any_command_is_the_one_it_runs_against():
    """``hermes --profile NAME <command>``, as the Hermes Agent and its operator's harness give
    it, for every command; and after the command too, as before."""
    commands = [(words, p) for words, p in command_parsers(build_top_level_parser()) if p.get_default("command_words")]
    assert len(commands) > 40
    for words, parser in commands:
        argv = [*words, *filled(parser)]
        before = build_top_level_parser().parse_args(["--profile", "work", *argv])
        assert (before.profile, implied_command(before)) == ("work", " ".join(words)), argv
        if words != ("mesh", "keys", "init"):  # its own -p names a gateway to key
            after = build_top_level_parser().parse_args([*argv, "-p", "work"])
            assert after.profile == "work", argv


def test_a_commands_usage_line_leaves_out_the_shared_options_which_its_help_still_lists():
    for words, parser in command_parsers(build_top_level_parser()):
        usage = parser.format_usage()
        assert "--json" not in usage, usage
        if words != ("mesh", "keys", "init"):  # its own -p, which names a gateway to key, is shown
            assert "-p NAME" not in usage, usage
        if "--json" in parser._option_string_actions:
            assert "--json" in parser.format_help(), words
    top = build_top_level_parser().format_help()
    assert "-p NAME, --profile NAME" in top and "--version" in top


@pytest.mark.parametrize("columns", ["60", "200", "0", "wide", None])
def test_the_help_is_as_wide_as_argparse_would_make_it(monkeypatch, columns):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    # $COLUMNS, else the terminal's width, else 80: what shutil.get_terminal_size says.
    assert build_top_level_parser()._get_formatter()._width == argparse.HelpFormatter(prog="hermes")._width
