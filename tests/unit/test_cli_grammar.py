"""The CLI grammar: every command has one target, every target is a function, and a command
parses to its own words."""

from __future__ import annotations

import argparse
import importlib

import pytest

from hermes_cli.commands import TARGETS
from shared.cli_grammar import build_top_level_parser


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
