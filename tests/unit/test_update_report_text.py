"""The text of ``hermes update``'s report: what it retried and what only the user can do."""

from __future__ import annotations

from hermes_cli.commands.update import _summary_text

SHA = "c" * 40


def report(**fields):
    base = {
        "update_id": "u2",
        "outcome": "success",
        "exit_code": 0,
        "receipt": "/r/u2.json",
        "after": {"code_sha": "b" * 40},
        "found_interrupted": [],
        "retried": [],
        "fleet": [],
        "followups": [],
        "restart_failed": [],
        "user_action": None,
        "up_to_date": True,
    }
    return {**base, **fields}


def test_a_stash_put_back_is_named_with_the_update_that_left_it():
    text = _summary_text(report(retried=[{"owed": "stash", "update_id": "u1", "sha": SHA, "how": "restored"}]))
    assert f"↻ local changes in stash {SHA[:12]}, left by update u1: restored" in text.splitlines()


def test_a_stash_handed_over_says_what_to_do():
    action = f"Your local changes are kept in stash stash@{{1}} ({SHA}): run `git stash apply {SHA}` ..."
    text = _summary_text(
        report(
            outcome="partial",
            exit_code=1,
            user_action=action,
            retried=[{"owed": "stash", "update_id": "u1", "sha": SHA, "how": "parked"}],
        )
    )
    lines = text.splitlines()
    assert f"↻ local changes in stash {SHA[:12]}, left by update u1: parked" in lines
    assert f"action needed: {action}" in lines
    assert lines[-1] == "update u2: partial (exit 1); receipt: /r/u2.json"


def test_a_restart_that_failed_is_named_with_its_reason():
    failed = {"profile": "work", "unit": "hermes-gateway-work.service", "reason": "exit-code, status 78"}
    text = _summary_text(report(restart_failed=[failed]))
    assert "⚠ restart: gateway work (hermes-gateway-work.service): exit-code, status 78" in text.splitlines()
