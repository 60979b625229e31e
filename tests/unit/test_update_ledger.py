"""What a committed update owes after each thing a run learns (``ledger``): pure decisions,
checked without files, processes or a clock."""

from __future__ import annotations

from services.updater import ledger, obligations
from services.updater.verify import CURRENT, DOWN, STALE, UNKNOWN, MatrixRow

NEW, OLD = "b" * 40, "a" * 40


def row(profile: str, verdict: str, *, running: str | None = OLD, expected: str | None = NEW) -> MatrixRow:
    alive = verdict != DOWN
    return MatrixRow(
        profile=profile,
        supervisor="unmanaged" if alive else None,
        pid=4100 if alive else None,
        state="running" if alive else DOWN,
        running=running,
        expected=expected,
        verdict=verdict,
        source="socket" if alive else None,
    )


def test_a_move_owes_every_expected_gateway_a_restart_onto_the_new_code():
    parts = ledger.owed_at_move(["default", "coder"], NEW, "u1")
    assert parts == {
        profile: {
            "expected": NEW,
            "state": obligations.NOT_RESTARTED,
            "reason": f"the code moved to {NEW[:12]}; not restarted yet",
            "update_id": "u1",
        }
        for profile in ("default", "coder")
    }


def test_a_verify_owes_exactly_the_gateways_it_found_wanting():
    matrix = [
        row("default", CURRENT, running=NEW),
        row("coder", STALE),
        row("writer", DOWN, running=None),
        row("gone", DOWN, running=None),  # never expected to run: nothing owed
        row("starting", UNKNOWN, running=None),
        row("blind", UNKNOWN, running=None, expected=None),  # nobody knows the new code: nothing to owe
    ]
    owed = ledger.owed_after_verify(matrix, ["default", "coder", "writer", "starting"], "u2")
    assert {p: (part["state"], part["reason"]) for p, part in owed.parts.items()} == {
        "coder": (obligations.STALE, f"runs {OLD[:12]}"),
        "writer": (obligations.DOWN, "down"),
        "starting": (obligations.NOT_RESTARTED, "alive, but what it runs could not be read"),
    }
    assert {part["expected"] for part in owed.parts.values()} == {NEW}
    assert {part["update_id"] for part in owed.parts.values()} == {"u2"}
    assert owed.followup == "gateway coder is stale; gateway writer is down; gateway starting is unknown"


def test_a_verify_that_finds_nothing_wanting_owes_nothing():
    owed = ledger.owed_after_verify([row("default", CURRENT, running=NEW)], ["default"], "u1")
    assert owed == ledger.FleetDebt({}, None)


def result(*followups: tuple[str, str], steps=("restart", "verify")) -> dict:
    return {
        "followups": [{"step": step, "reason": reason} for step, reason in followups],
        "steps": [{"name": name, "ok": True} for name in steps],
    }


def test_a_result_owing_only_fleet_restarts_clears_the_completion():
    owed = ledger.owed_after_result(
        result(("fleet-restart", "gateway a is stale"), ("fleet-restart", "gateway b is down"))
    )
    assert owed.followups == [("fleet-restart", "gateway a is stale; gateway b is down")]
    assert (owed.completion_owed, owed.verified) == (False, True)


def test_a_result_owing_its_tail_keeps_the_completion_owed():
    owed = ledger.owed_after_result(
        result(("dependencies", "pip failed"), ("fleet-restart", "gateway a is stale"), ("migrations", "x: bad"))
    )
    assert owed.followups == [
        ("dependencies", "pip failed"),
        ("fleet-restart", "gateway a is stale"),
        ("migrations", "x: bad"),
    ]
    assert owed.completion_owed


def test_bytecode_not_written_is_reported_but_leaves_the_completion_done():
    owed = ledger.owed_after_result(
        result(("bytecode", "1 of the tree's files not compiled: shared/x.py: SyntaxError"))
    )
    assert owed.followups == [("bytecode", "1 of the tree's files not compiled: shared/x.py: SyntaxError")]
    assert (owed.completion_owed, owed.verified) == (False, True)


def test_a_result_that_never_verified_says_nothing_of_the_fleet():
    owed = ledger.owed_after_result(result(("completion", "RuntimeError: boom"), steps=("completion",)))
    assert (owed.completion_owed, owed.verified) == (True, False)
    assert ledger.owed_after_result({}) == ledger.ResultDebt([], False, False)


def test_a_completion_that_never_delivered_owes_itself_and_its_restarts():
    assert ledger.owed_unfinished("it died", {}) == [("completion", "it died")]
    fleet = {
        "coder": obligations.owed_part(NEW, obligations.NOT_RESTARTED, "moved", "u1"),
        "writer": obligations.owed_part(NEW, obligations.STALE, "stale", "u1"),
        "old": obligations.owed_part(OLD, obligations.DOWN, "down", "u0"),
    }
    assert ledger.owed_unfinished("it died", fleet) == [
        ("completion", "it died"),
        ("fleet-restart", f"gateways coder, writer, old are not restarted onto {OLD[:12]}, {NEW[:12]}"),
    ]


def test_an_up_to_date_run_restarts_the_stale_and_the_owed_that_are_down():
    matrix = [row("a", STALE), row("b", DOWN), row("c", DOWN), row("d", UNKNOWN), row("e", CURRENT, running=NEW)]
    fleet = {"c": obligations.owed_part(NEW, obligations.DOWN, "down", "u1")}
    assert ledger.wanting_restart(matrix, fleet) == {"a", "c"}
