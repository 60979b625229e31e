"""The updater's launchd restarts: which jobs are the install's, and how each is restarted.

This machine has no launchd (a Linux container). The jobs are plists written by ``render``
into temporary LaunchAgents and LaunchDaemons directories, beside hand-written foreign and
malformed ones; ``launchctl`` is a recording runner that logs every argv and answers with
canned results. The gateways are real processes: a drained one really exits 75, and
launchd's part (KeepAlive starting it again, ``kickstart -k`` or ``bootstrap`` starting a new
one) is played by starting a real gateway for the same home, so the check that a fresh
process answers on the expected code is the real one.
"""

from __future__ import annotations

import threading
from pathlib import Path

from fleet.discovery import discover
from fleet.supervisors import launchd
from services.updater.restart.base import unit_targets
from services.updater.restart.launchd import LaunchdKind
from shared import exit_codes, homes
from shared.gateways import ops
from shared.transport.sync_client import SyncClient
from tests.support.launchd import SHA, SHORT, UID, mixed_fleet, target, write_job
from tests.support.processes import GatewayProcess, read_state, wait_for


def live(root: Path) -> dict:
    return {record.profile: record for record in discover(root, scan=False)}


def labels_named(calls: list[list[str]]) -> set[str]:
    """Every job label that appears in a recorded launchctl argv, as a target or a plist."""
    return {
        word.rsplit("/", 1)[-1].removesuffix(".plist") for argv in calls for word in argv[2:] if "ai.hermes" in word
    }


def status(gateway: GatewayProcess) -> dict:
    with SyncClient(gateway.endpoint.control) as client:
        return client.call(ops.STATUS)


def test_commands_name_only_our_jobs_each_in_its_own_domain(root, launchd_dirs, tmp_path, fake_launchd):
    mixed_fleet(root, launchd_dirs, tmp_path)
    ours, _, _ = LaunchdKind(euid=0, agent_dirs=launchd_dirs).find(root)
    # Nothing is running; work and batch are loaded (kickstart), default is not (bootstrap).
    fake_launchd.loaded = {target("ai.hermes.gateway-work"), target("ai.hermes.gateway-batch", "system")}
    fake_launchd.on = {
        target("ai.hermes.gateway"): lambda: fake_launchd.spawn("default"),
        target("ai.hermes.gateway-work"): lambda: fake_launchd.spawn("work"),
        target("ai.hermes.gateway-batch", "system"): lambda: fake_launchd.spawn("batch"),
    }
    outcomes = LaunchdKind(SHORT, runner=fake_launchd, uid=UID).restart(root, unit_targets(ours, live(root)), SHA)
    assert [(o.profile, o.method, o.ok, o.old_pid) for o in outcomes] == [
        ("default", "bootstrap", True, 0),
        ("work", "kickstart", True, 0),
        ("batch", "kickstart", True, 0),
    ]
    assert sorted(fake_launchd.calls) == sorted(
        [
            ["launchctl", "print", f"gui/{UID}/ai.hermes.gateway"],
            ["launchctl", "bootstrap", f"gui/{UID}", str(launchd_dirs["user"] / "ai.hermes.gateway.plist")],
            ["launchctl", "print", f"gui/{UID}/ai.hermes.gateway-work"],
            ["launchctl", "kickstart", "-k", f"gui/{UID}/ai.hermes.gateway-work"],
            ["launchctl", "print", "system/ai.hermes.gateway-batch"],
            ["launchctl", "kickstart", "-k", "system/ai.hermes.gateway-batch"],
        ]
    )
    assert labels_named(fake_launchd.calls) == {
        "ai.hermes.gateway",
        "ai.hermes.gateway-work",
        "ai.hermes.gateway-batch",
    }


def test_a_system_job_without_root_is_skipped_and_its_gateway_left_alone(root, launchd_dirs, fake_launchd):
    write_job(launchd_dirs, "system", "batch", root / "profiles" / "batch")
    write_job(launchd_dirs, "user", "work", root / "profiles" / "work")
    batch = fake_launchd.start("batch")
    fake_launchd.keep_alive(fake_launchd.start("work"))
    ours, foreign, skipped = LaunchdKind(euid=UID, agent_dirs=launchd_dirs).find(root)
    assert [u.name for u in ours] == ["ai.hermes.gateway-work"] and foreign == []
    ((label, reason),) = skipped
    assert label == "ai.hermes.gateway-batch" and "needs root" in reason
    (outcome,) = LaunchdKind(SHORT, runner=fake_launchd, uid=UID).restart(root, unit_targets(ours, live(root)), SHA)
    assert (outcome.profile, outcome.method, outcome.ok) == ("work", "drain", True)
    assert fake_launchd.calls == []
    answer = status(batch)
    assert (answer["pid"], answer["state"]) == (batch.pid, ops.RUNNING)


# --- restarting ---------------------------------------------------------------------------------


def test_a_drained_gateway_that_launchd_brings_back_needs_no_kickstart(root, launchd_dirs, fake_launchd):
    write_job(launchd_dirs, "user", "work", root / "profiles" / "work")
    old = fake_launchd.start("work")
    fake_launchd.keep_alive(old)
    fake_launchd.loaded = {target("ai.hermes.gateway-work")}
    turn: dict = {}

    def one_turn() -> None:
        with SyncClient(old.endpoint.control) as client:
            turn.update(client.call(ops.TURN, {"text": "in flight", "seconds": 1.0}))

    in_flight = threading.Thread(target=one_turn)
    in_flight.start()
    wait_for(lambda: (read_state(old.home) or {}).get("active_turns") == 1, timeout=10, what="a turn in flight")
    ours, _, _ = LaunchdKind(euid=0, agent_dirs=launchd_dirs).find(root)
    (outcome,) = LaunchdKind(SHORT, runner=fake_launchd, uid=UID).restart(root, unit_targets(ours, live(root)), SHA)
    in_flight.join(timeout=10)
    assert (outcome.method, outcome.ok, outcome.reason) == ("drain", True, None)
    assert (outcome.old_pid, outcome.finished, outcome.cut) == (old.pid, 1, 0)
    assert turn["text"] == "in flight"  # the drain let it finish
    assert old.wait_exit() == exit_codes.PLANNED_RESTART
    new = fake_launchd.processes[-1]
    assert outcome.new_pid == new.pid != old.pid
    assert fake_launchd.calls == []


def test_no_fresh_process_after_the_drain_means_kickstart_k_then_verify(root, launchd_dirs, fake_launchd):
    write_job(launchd_dirs, "user", "work", root / "profiles" / "work")
    old = fake_launchd.start("work")  # nothing brings it back after the drain
    work = target("ai.hermes.gateway-work")
    fake_launchd.loaded = {work}
    fake_launchd.on = {work: lambda: fake_launchd.spawn("work")}
    ours, _, _ = LaunchdKind(euid=0, agent_dirs=launchd_dirs).find(root)
    (outcome,) = LaunchdKind(SHORT, runner=fake_launchd, uid=UID).restart(root, unit_targets(ours, live(root)), SHA)
    assert (outcome.method, outcome.ok, outcome.old_pid) == ("kickstart", True, old.pid)
    assert "after the drain no gateway answered" in outcome.reason and work in outcome.reason
    assert fake_launchd.calls == [["launchctl", "print", work], ["launchctl", "kickstart", "-k", work]]
    new = fake_launchd.processes[-1]
    assert outcome.new_pid == new.pid != old.pid
    assert status(new)["code_sha"] == SHA


def test_one_gateway_that_never_comes_back_fails_alone(root, launchd_dirs, fake_launchd):
    for profile in ("default", "work", "ops"):
        write_job(launchd_dirs, "user", profile, homes.profile_home(profile, root))
    fake_launchd.keep_alive(fake_launchd.start("default"))  # launchd brings it back after the drain
    fake_launchd.start("work")  # drained, and neither KeepAlive nor kickstart brings it back
    fake_launchd.loaded = {target(launchd.unit_name(p)) for p in ("default", "work", "ops")}
    fake_launchd.on = {target("ai.hermes.gateway-ops"): lambda: fake_launchd.spawn("ops")}  # not running: kickstarted
    ours, _, _ = LaunchdKind(euid=0, agent_dirs=launchd_dirs).find(root)
    kind = LaunchdKind(SHORT, runner=fake_launchd, uid=UID)
    outcomes = {o.profile: o for o in kind.restart(root, unit_targets(ours, live(root)), SHA)}
    assert {p: (o.method, o.ok) for p, o in outcomes.items()} == {
        "default": ("drain", True),
        "work": ("kickstart", False),
        "ops": ("kickstart", True),
    }
    assert "after the kickstart no gateway answered" in outcomes["work"].reason
    assert ["launchctl", "kickstart", "-k", target("ai.hermes.gateway-work")] in fake_launchd.calls
    assert ["launchctl", "kickstart", "-k", target("ai.hermes.gateway")] not in fake_launchd.calls


def test_a_gateway_back_on_other_code_fails(root, launchd_dirs, fake_launchd):
    write_job(launchd_dirs, "user", "work", root / "profiles" / "work")
    fake_launchd.keep_alive(fake_launchd.start("work"))
    fake_launchd.loaded = {target("ai.hermes.gateway-work")}
    ours, _, _ = LaunchdKind(euid=0, agent_dirs=launchd_dirs).find(root)
    (outcome,) = LaunchdKind(SHORT, runner=fake_launchd, uid=UID).restart(
        root, unit_targets(ours, live(root)), "0" * 40
    )
    assert (outcome.method, outcome.ok) == ("kickstart", False)
    assert f"came back on {SHA[:12]}, not the new code" in outcome.reason
