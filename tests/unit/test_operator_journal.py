"""The installer's journal is read strictly: exactly the fields a command writes, with the
earlier format (no action, phase or owner) read as an install before its point of no return."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hermes_cli.operator.lifecycle import parse_journal

POLICY = Path("/state/integrations/hermes/0123456789abcdef/policy.json")
LEGACY = {
    "stage": ".pohunek-stage-0a0b0c0d0e0f",
    "backup": ".pohunek-backup-0a0b0c0d0e0f",
    "had_plugin": True,
    "had_policy": True,
    "was_enabled": True,
    "policy_path": str(POLICY),
}
INSTALL = {**LEGACY, "action": "install", "phase": "committed", "owner": {"pid": 42, "start_time": 7}}
UNINSTALL = {
    "action": "uninstall",
    "phase": "prepared",
    "owner": {"pid": 42, "start_time": 7},
    "was_enabled": False,
    "policy_path": str(POLICY),
    "assets": ["__init__.py", "skills/pohunek/SKILL.md"],
}


def parsed(document: object) -> dict | None:
    return parse_journal(json.dumps(document).encode(), POLICY)


def test_a_journal_of_the_earlier_format_is_an_install_before_its_point_of_no_return():
    assert parsed(LEGACY) == {**LEGACY, "action": "install", "phase": "prepared", "owner": None}


@pytest.mark.parametrize("journal", [INSTALL, UNINSTALL])
def test_each_command_reads_back_what_it_writes(journal):
    assert parsed(journal) == journal


@pytest.mark.parametrize(
    "journal",
    [
        {**INSTALL, "extra": 1},
        {k: v for k, v in INSTALL.items() if k != "phase"},
        {k: v for k, v in INSTALL.items() if k != "owner"},
        {**INSTALL, "phase": "done"},
        {**INSTALL, "action": "repair"},
        {**INSTALL, "action": ["install"]},
        {**INSTALL, "owner": None},
        {**INSTALL, "owner": {"pid": 0, "start_time": 7}},
        {**INSTALL, "had_plugin": "yes"},
        {**INSTALL, "stage": "../elsewhere"},
        {**INSTALL, "backup": ".pohunek-stage-0a0b"},
        {**INSTALL, "policy_path": "/etc/passwd"},
        {**LEGACY, "policy_path": "/etc/passwd"},
        {**UNINSTALL, "stage": LEGACY["stage"]},
        {**UNINSTALL, "assets": ["../../outside"]},
        {**UNINSTALL, "assets": "__init__.py"},
        {**UNINSTALL, "action": "install"},
        ["not", "a", "journal"],
    ],
)
def test_anything_else_is_not_a_journal_of_this_installer(journal):
    assert parsed(journal) is None


def test_bytes_that_are_not_json_are_not_a_journal():
    assert parse_journal(b"\xff{", POLICY) is None
    assert parse_journal(b"[" * 100_000, POLICY) is None
