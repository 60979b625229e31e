"""``hermes update`` of a fleet with multiplex gateways, against real processes: a mesh whose
supervisord runs per-profile programs and the ``hermes-multiplex`` program, an unmanaged
multiplex process beside it, and a served profile gone before the update. Each process is
restarted once, and every profile it served is verified on its own socket."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fleet.supervisors import supervisord as sv
from services.updater.restart import restart_fleet
from shared import homes
from shared.gateways import ops
from shared.transport.sync_client import SyncClient
from shared.version import code_sha
from tests.support.homes import make_profile
from tests.support.processes import ROOT, parallel, read_state, wait_for

pytestmark = pytest.mark.slow

MESH = ("a", "b", "c")  # the hermes-multiplex program's set
SOLO = ("default", "x")  # an unmanaged multiplex process, launched on the root home


def states(root: Path, profiles) -> dict[str, dict]:
    return {p: read_state(homes.profile_home(p, root)) for p in profiles}


def one_process(seen: dict[str, dict]) -> tuple[int, str]:
    """The (pid, instance id) every profile's state file names: the same for all of them."""
    ids = {(s["pid"], s["instance_id"]) for s in seen.values()}
    assert len(ids) == 1, seen
    return ids.pop()


def ask(root: Path, profile: str, spec, args=None) -> dict:
    endpoint = homes.endpoint(homes.profile_home(profile, root), ops.SERVICE, create=False)
    with SyncClient(endpoint.control) as client:
        return client.call(spec, args or {})


def spawns(root: Path, name: str) -> int:
    return (root / "logs" / "mesh" / "supervisord.log").read_text().count(f"spawned: '{name}' with pid")


def test_an_update_restarts_each_process_of_a_mixed_fleet_once(install):
    for profile in (*MESH, "w", "x"):
        make_profile(install.root, profile)
    code, up = install.hermes_json("mesh", "up", "--programs", "--profiles", "w", "--serve", "c,a,b", timeout=120)
    assert code == 0, up
    programs = {p["name"]: p for p in up["programs"]}
    assert sorted(programs) == ["hermes-gateway-w", "hermes-multiplex"]
    assert (programs["hermes-multiplex"]["profile"], programs["hermes-multiplex"]["served_profiles"]) == (
        None,
        list(MESH),
    )
    shown = install.hermes("mesh", "status").stdout
    assert any(line.split()[:3] == ["hermes-multiplex", "a,b,c", "RUNNING"] for line in shown.splitlines()), shown
    solo = install.gateway("default", serve=list(SOLO))
    mesh_before = one_process(states(install.root, MESH))
    assert mesh_before[0] == programs["hermes-multiplex"]["pid"]
    solo_before = one_process(states(install.root, SOLO))
    assert solo_before[0] == solo.pid
    w_before = read_state(install.root / "profiles" / "w")["pid"]
    # Under supervisord, turns of the served profiles run at once, each in its own profile's scope.
    answers = parallel([lambda p=p: ask(install.root, p, ops.TURN, {"text": p, "seconds": 0.3}) for p in MESH])
    assert [(a["profile"], a["home"]) for a in answers] == [(p, str(homes.profile_home(p, install.root))) for p in MESH]
    assert {ask(install.root, p, ops.STATUS)["supervisor"] for p in MESH} == {"supervisord"}

    new = install.release("release 2")
    code, report = install.hermes_json("update", "--yes")
    assert code == 0, report

    assert report["outcome"] == "success" and install.head() == new
    assert {(row["profile"], row["verdict"]) for row in report["fleet"]} == {
        (p, "current") for p in (*SOLO, *MESH, "w")
    }
    restarts = {o["profile"]: o for o in json.loads(Path(report["receipt"]).read_text())["restart"]}
    assert sorted(restarts) == sorted((*SOLO, *MESH, "w")) and all(o["ok"] for o in restarts.values()), restarts
    # The multiplex program: drained once, started once more by supervisord, one new process.
    mesh_after = one_process(states(install.root, MESH))
    assert mesh_after[0] != mesh_before[0] and mesh_after[1] != mesh_before[1]
    assert spawns(install.root, sv.MULTIPLEX_PROGRAM) == 2  # by `mesh up`, then by the restart: never twice
    assert sv.status(install.root).program(sv.MULTIPLEX_PROGRAM).pid == mesh_after[0]
    for profile in MESH:
        outcome = restarts[profile]
        assert (outcome["old_pid"], outcome["new_pid"], outcome["method"]) == (mesh_before[0], mesh_after[0], "drain")
        assert "one process serves a, b, c: restarted once, through a" in outcome["note"], outcome
    assert restarts["a"]["note"].startswith("asked supervisord to start hermes-multiplex once drained")
    # The unmanaged one re-executed itself once, in its pid: a new instance, serving both again.
    solo_after = one_process(states(install.root, SOLO))
    assert solo_after[0] == solo.pid and solo_after[1] != solo_before[1]
    for profile in SOLO:
        outcome = restarts[profile]
        assert (outcome["old_pid"], outcome["new_pid"], outcome["method"]) == (solo.pid, solo.pid, "reexec")
        assert "one process serves default, x: restarted once, through default" in outcome["note"]
    assert restarts["w"]["new_pid"] not in (None, w_before) and restarts["w"]["note"].startswith(
        "asked supervisord to start hermes-gateway-w once drained"
    )


def test_a_served_profile_gone_before_the_update_fails_none_of_the_others(root, gateways):
    for profile in ("a", "b", "c", "d"):
        make_profile(root, profile)
    process = gateways(root, "default", serve=["a", "b", "c", "d"])
    shutil.rmtree(homes.profile_home("d", root))  # deleted: owed nothing
    # c can no longer be served (its secrets cannot be read): the fresh process leaves it out.
    (homes.profile_home("c", root) / ".env").write_text("NOT A NAME=value LINE\n")

    outcomes = {o.profile: o for o in restart_fleet(root, code_sha(ROOT))}

    assert sorted(outcomes) == ["a", "b", "c"]
    for profile in ("a", "b"):
        outcome = outcomes[profile]
        assert (outcome.ok, outcome.method, outcome.old_pid, outcome.new_pid) == (
            True,
            "reexec",
            process.pid,
            process.pid,
        )
    left = outcomes["c"]
    assert not left.ok and left.reason.endswith("the fresh process no longer serves c, and no gateway runs it now")
    # The socket answers running as the state is set; the file says so once its write lands.
    after = wait_for(
        lambda: (
            (state := read_state(homes.profile_home("a", root))) and state["gateway_state"] == ops.RUNNING and state
        ),
        timeout=5,
        what="a's state file to say running",
    )
    assert (after["pid"], after["served_profiles"]) == (process.pid, ["a", "b"])


def test_a_multiplex_program_left_serving_one_profile_is_restarted_through_it(install):
    for profile in ("a", "b"):
        make_profile(install.root, profile)
    code, up = install.hermes_json("mesh", "up", "--serve", "a,b", timeout=120)
    assert code == 0, up
    shutil.rmtree(homes.profile_home("b", install.root))
    a_home = homes.profile_home("a", install.root)
    wait_for(lambda: read_state(a_home)["served_profiles"] == ["a"], timeout=15, what="b let go")
    before = read_state(a_home)["pid"]

    new = install.release("release 2")
    code, report = install.hermes_json("update", "--yes")

    assert code == 0 and report["outcome"] == "success" and install.head() == new, report
    restarts = {o["profile"]: o for o in json.loads(Path(report["receipt"]).read_text())["restart"]}
    assert restarts["a"]["ok"] and restarts["a"]["old_pid"] == before, restarts["a"]
    assert restarts["a"]["note"].startswith("asked supervisord to start hermes-multiplex once drained"), restarts
    assert sv.status(install.root).program(sv.MULTIPLEX_PROGRAM).pid == restarts["a"]["new_pid"]
