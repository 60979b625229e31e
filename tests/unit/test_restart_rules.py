"""The restart's pure rules: whether a status answer shows a restart done (``freshness``),
which kind restarts which profile of the fleet (``fleet.plan_fleet``), a multiplex process
restarted once for every profile it serves. No processes, no clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.discovery import GatewayRecord
from fleet.supervisors import Unit
from services.updater.restart import KINDS
from services.updater.restart.base import WAITS, Found, RestartOutcome, Target, turns
from services.updater.restart.fleet import plan_fleet
from services.updater.restart.freshness import FRESH, OLD, SILENT, STALE, STARTING, OldProcess, judge
from services.updater.restart.multiplex import served
from shared.gateways import ops

NEW, OTHER = "n" * 40, "o" * 40
ROOT = Path("/srv/hermes")


def answer(pid=2, start_time=20, state=ops.RUNNING, code_sha=NEW) -> dict:
    return {"pid": pid, "start_time": start_time, "state": state, "code_sha": code_sha}


BEFORE = OldProcess(1, 10)


@pytest.mark.parametrize(
    ("seen", "old", "expected", "knobs", "verdict"),
    [
        (None, BEFORE, NEW, {}, SILENT),
        ({}, BEFORE, NEW, {}, SILENT),
        (answer(pid=1, start_time=10), BEFORE, NEW, {}, OLD),  # the old process still answers
        (answer(pid=1, start_time=99), BEFORE, NEW, {}, FRESH),  # its pid, reused by a new process
        (answer(state=ops.STARTING), BEFORE, NEW, {}, STARTING),
        (answer(pid=1, start_time=10, state=ops.DRAINING), BEFORE, NEW, {}, OLD),
        (answer(code_sha=OTHER), BEFORE, NEW, {}, STALE),
        (answer(code_sha=None), BEFORE, NEW, {}, STALE),  # code it does not say is not the new code
        (answer(code_sha=OTHER), BEFORE, None, {}, FRESH),  # no code expected: any fresh one will do
        (answer(pid=1, start_time=10), None, NEW, {}, FRESH),  # nothing ran before
        # A re-exec keeps pid and start time: the new code is what says it is fresh.
        (answer(pid=1, start_time=10), BEFORE, NEW, {"reexec": True}, FRESH),
        (answer(pid=1, start_time=10, code_sha=OTHER), BEFORE, NEW, {"reexec": True}, OLD),
        # systemd names the main process by pid alone, and only that process counts.
        (answer(pid=1, start_time=99), OldProcess(1, by_pid=True), NEW, {}, OLD),
        (answer(pid=2), OldProcess(1, by_pid=True), NEW, {"main_pid": 3}, OLD),
        (answer(pid=3), OldProcess(1, by_pid=True), NEW, {"main_pid": 3}, FRESH),
        (answer(pid=3, code_sha=OTHER), OldProcess(1, by_pid=True), NEW, {"main_pid": 3}, STALE),
    ],
)
def test_a_status_answer_is_judged(seen, old, expected, knobs, verdict):
    judged = judge(seen, old, expected, **knobs)
    assert judged.verdict == verdict
    assert judged.done == (verdict == FRESH)
    if seen:
        assert (judged.pid, judged.state, judged.code_sha) == (seen["pid"], seen["state"], seen["code_sha"])


# --- which kind restarts which profile --------------------------------------------------------


def gateway(
    profile: str,
    supervisor: str,
    pid: int = 100,
    *,
    served: tuple[str, ...] = (),
    instance: str | None = None,
    start_time: int | None = 1,
) -> GatewayRecord:
    home = ROOT if profile == "default" else ROOT / "profiles" / profile
    return GatewayRecord(
        profile,
        pid,
        start_time,
        ops.RUNNING,
        OTHER,
        "0.1",
        0,
        supervisor,
        "socket",
        home,
        instance_id=instance,
        served_profiles=served,
    )


def multiplex(supervisor: str, pid: int, served: tuple[str, ...], **knobs) -> list[GatewayRecord]:
    """The records discovery gives of one multiplex process: one per profile it serves."""
    return [gateway(profile, supervisor, pid, served=served, **knobs) for profile in served]


def unit(kind: str, profile: str) -> Unit:
    name = {"systemd": f"hermes-gateway-{profile}.service", "launchd": f"ai.hermes.gateway-{profile}"}[kind]
    return Unit(kind=kind, name=name, profile=profile, home=ROOT / "profiles" / profile)


def batches(plan) -> dict:
    """(phase, kind) -> [(profile, unit name or None, gateway pid or None)], with the sibling
    profiles of a multiplex target after them."""
    return {
        (phase, kind): [
            (t.profile, t.unit and t.unit.name, t.gateway and t.gateway.pid, *(s.profile for s in t.siblings))
            for t in targets
        ]
        for phase, found in (("first", plan.first), ("last", plan.last))
        for kind, targets in found.items()
    }


def test_each_gateway_goes_to_the_kind_it_runs_under():
    live = [gateway("work", "systemd", 1), gateway("mesh", "supervisord", 2), gateway("solo", "unmanaged", 3)]
    live.append(gateway("odd", "runit", 4))  # a supervisor no kind knows: as if none
    live += [gateway("h1", "gateway_host", 5), gateway("h2", "gateway_host", 6)]  # one batch: one roll
    found = {"systemd": Found([unit("systemd", "work"), unit("systemd", "mesh"), unit("systemd", "down")], [], [])}
    plan = plan_fleet(live, found, KINDS)
    assert batches(plan) == {
        # work runs under its unit; down runs nowhere, so its unit starts it; mesh's gateway runs
        # under supervisord, so the systemd unit named for it is not the one to restart it.
        ("first", "systemd"): [
            ("work", "hermes-gateway-work.service", 1),
            ("down", "hermes-gateway-down.service", None),
        ],
        ("first", "supervisord"): [("mesh", None, 2)],
        ("first", "gateway_host"): [("h1", None, 5), ("h2", None, 6)],
        ("first", "unmanaged"): [("solo", None, 3), ("odd", None, 4)],
    }
    assert plan.left == []


def test_a_unit_claimed_by_one_kind_is_not_taken_by_the_next():
    found = {
        "systemd": Found([unit("systemd", "work")], [], []),
        "launchd": Found([unit("launchd", "work"), unit("launchd", "other")], [], []),
    }
    plan = plan_fleet([], found, KINDS)
    assert batches(plan) == {
        ("first", "systemd"): [("work", "hermes-gateway-work.service", None)],
        ("first", "launchd"): [("other", "ai.hermes.gateway-other", None)],
    }


def test_a_unit_that_cannot_be_acted_on_leaves_its_gateway_alone():
    live = [gateway("batch", "systemd", 7), gateway("mesh", "supervisord", 8)]
    skipped = [
        ("hermes-gateway-batch.service", "needs root"),
        ("hermes-gateway-mesh.service", "needs root"),  # but mesh runs under supervisord: restarted there
        ("systemd user manager", "no user bus"),  # no profile: claims nothing
    ]
    plan = plan_fleet(live, {"systemd": Found([], [], skipped)}, KINDS)
    [left] = plan.left
    assert (left.profile, left.method, left.ok, left.old_pid, left.new_pid) == ("batch", "skip", False, 7, 7)
    assert (left.unit, left.reason) == ("hermes-gateway-batch.service", "hermes-gateway-batch.service: needs root")
    assert batches(plan) == {("first", "supervisord"): [("mesh", None, 8)]}


def test_an_ancestors_gateway_is_restarted_last_and_only_the_profiles_asked_for():
    live = [gateway("default", "unmanaged", 1), gateway("coder", "unmanaged", 2), gateway("work", "systemd", 3)]
    found = {"systemd": Found([unit("systemd", "work")], [], [])}
    plan = plan_fleet(live, found, KINDS, ancestors={"coder", "work"})
    assert batches(plan) == {
        ("first", "unmanaged"): [("default", None, 1)],
        ("last", "unmanaged"): [("coder", None, 2)],
        ("last", "systemd"): [("work", "hermes-gateway-work.service", 3)],
    }
    only = plan_fleet(live, found, KINDS, only={"coder"})
    assert batches(only) == {("first", "unmanaged"): [("coder", None, 2)]}
    assert plan_fleet(live, found, KINDS, only=set()) == plan_fleet([], {}, KINDS)


def test_a_batch_without_a_gateway_to_restart_over_its_socket_is_refused_whole():
    with pytest.raises(ValueError, match="coder"):
        KINDS["unmanaged"].restart(
            ROOT, [Target("default", gateway=gateway("default", "unmanaged")), Target("coder")], None
        )


# --- a multiplex gateway: one process, several profiles -----------------------------------------

MESH = ("a", "b", "c")  # under supervisord, the hermes-multiplex program
SOLO = ("x", "y")  # started by hand: nothing supervises it


def mixed_fleet() -> list[GatewayRecord]:
    """In fleet order, as discovery lists it: default first, then by profile name."""
    live = [
        gateway("default", "supervisord", 1),
        *multiplex("supervisord", 5, MESH, instance="m1"),
        gateway("w", "systemd", 2),
        *multiplex("unmanaged", 6, SOLO, instance="m2"),
    ]
    return sorted(live, key=lambda g: (g.profile != "default", g.profile))


def test_a_multiplex_process_is_one_target_led_by_its_first_profile():
    found = {"systemd": Found([unit("systemd", "w"), unit("systemd", "b"), unit("systemd", "down")], [], [])}
    plan = plan_fleet(mixed_fleet(), found, KINDS)
    assert batches(plan) == {
        # b's systemd unit does not take b: the multiplex process is b's gateway.
        ("first", "systemd"): [
            ("w", "hermes-gateway-w.service", 2),
            ("down", "hermes-gateway-down.service", None),
        ],
        ("first", "supervisord"): [("default", None, 1), ("a", None, 5, "b", "c")],
        ("first", "unmanaged"): [("x", None, 6, "y")],
    }
    assert plan.left == []


def test_only_one_served_profile_restarts_its_whole_process():
    plan = plan_fleet(mixed_fleet(), {}, KINDS, only={"c"})
    assert batches(plan) == {("first", "supervisord"): [("a", None, 5, "b", "c")]}
    both = plan_fleet(mixed_fleet(), {}, KINDS, only={"y", "w"})
    assert batches(both) == {("first", "systemd"): [("w", None, 2)], ("first", "unmanaged"): [("x", None, 6, "y")]}


def test_an_ancestor_multiplex_process_goes_last_once():
    # Every profile the ancestor's pid serves is an ancestor's (``fleet._ancestor_profiles``).
    plan = plan_fleet(mixed_fleet(), {}, KINDS, ancestors=set(SOLO))
    assert batches(plan) == {
        ("first", "supervisord"): [("default", None, 1), ("a", None, 5, "b", "c")],
        ("first", "systemd"): [("w", None, 2)],
        ("last", "unmanaged"): [("x", None, 6, "y")],
    }


def test_records_are_one_process_by_instance_id_else_by_pid_and_start_time():
    # No instance id: the same pid and start time is one process; the same pid with another
    # start time is another process (the pid was reused).
    live = [
        *multiplex("unmanaged", 7, ("a", "b"), start_time=10),
        *multiplex("unmanaged", 7, ("c", "d"), start_time=11),
        *multiplex("unmanaged", 8, ("e", "f"), instance="i1", start_time=None),
    ]
    assert batches(plan_fleet(live, {}, KINDS)) == {
        ("first", "unmanaged"): [("a", None, 7, "b"), ("c", None, 7, "d"), ("e", None, 8, "f")]
    }
    # Per-profile gateways never collapse, whatever pid they report (each in its own container).
    twins = [gateway("a", "unmanaged", 1, instance="i2"), gateway("b", "unmanaged", 1, instance="i3")]
    assert batches(plan_fleet(twins, {}, KINDS)) == {("first", "unmanaged"): [("a", None, 1), ("b", None, 1)]}
    # A multiplex process still starting names only its own profile in each record: its
    # instance id alone says the records are one process, restarted once.
    starting = [gateway("a", "unmanaged", 9, instance="i4"), gateway("b", "unmanaged", 9, instance="i4")]
    assert batches(plan_fleet(starting, {}, KINDS)) == {("first", "unmanaged"): [("a", None, 9, "b")]}


def test_a_failed_multiplex_restart_fails_every_profile_it_served_with_the_leads_reason():
    lead, *siblings = multiplex("supervisord", 5, MESH, instance="m1")
    target = Target("a", gateway=lead, siblings=tuple(siblings))
    failed = RestartOutcome("a", "supervisord", 5, None, "drain", False, "drain was refused: busy")
    outcomes = served(failed, target, NEW, WAITS)
    note = "one process serves a, b, c: restarted once, through a"
    assert [(o.profile, o.old_pid, o.new_pid, o.method, o.ok) for o in outcomes] == [
        (p, 5, None, "drain", False) for p in MESH
    ]
    assert outcomes[0].reason == "drain was refused: busy"
    assert {o.reason for o in outcomes[1:]} == {"served by the process of a: drain was refused: busy"}
    assert {o.note for o in outcomes} == {note}
    # A per-profile gateway's outcome is its own, untouched.
    alone = RestartOutcome("default", "supervisord", 1, 2, "drain", True)
    assert served(alone, Target("default", gateway=gateway("default", "supervisord", 1)), NEW, WAITS) == [alone]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"finished": ["t1", "t2"], "cut": ["t3"], "accepted": 3}, {"finished": 2, "cut": 1, "accepted": 3}),
        ({"finished": [], "cut": []}, {"finished": 0, "cut": 0, "accepted": None}),  # a gateway that does not say
        ({"accepted": -1}, {"finished": 0, "cut": 0, "accepted": None}),
        ({"accepted": True}, {"finished": 0, "cut": 0, "accepted": None}),
        ({"accepted": "3"}, {"finished": 0, "cut": 0, "accepted": None}),
    ],
)
def test_a_drains_answer_gives_its_turns_and_only_a_count_it_can_trust(answer, expected):
    assert turns(answer) == expected
