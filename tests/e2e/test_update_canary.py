"""The canary, against a real origin, a real install, real gateways under a real supervisord:
before the tree moves, the fetched commit's own gateway serves a probe turn on a scratch copy of
a profile; a release that fails it never reaches a live gateway, and nothing is committed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from fleet.health import PROBE
from shared import homes
from shared.gateways import ops
from shared.protocol import RemoteError
from shared.transport.sync_client import SyncClient
from tests.e2e.test_update_health import AGENT_TURN, WORK, break_turns
from tests.support.installs import git, kill_updater_paused_at, start_update, updater_pid
from tests.support.processes import read_state, wait_for
from tests.support.releases import patch_release

PROFILES = tuple(f"p{n}" for n in range(1, 9))
WAIT = 60.0
TURN_SECONDS = 4.0  # long enough to be in flight through the whole canary


def canary_on(install, min_healthy: float = 1) -> None:
    """The root's config.yaml with the canary and the gates on (the tests' installs turn them off)."""
    (install.root / "config.yaml").write_text(f"update:\n  min_healthy: {min_healthy:g}\n")


def hang_the_canary(dev: Path) -> None:
    """A release whose gateway, started as a canary, hangs before it serves anything."""
    anchor = "from services.gateway.drained_exit import exit_now\n"
    hang = 'import os, time\nif "hermes-canary-" in os.getcwd():\n    time.sleep(300)\n'
    patch_release(dev / "services" / "gateway" / "__main__.py", anchor, hang + anchor)


def ask(root: Path, profile: str, spec, args=None, timeout: float = WAIT) -> dict:
    endpoint = homes.endpoint(homes.profile_home(profile, root), ops.SERVICE, create=False)
    with SyncClient(endpoint.control) as client:
        return client.call(spec, args or {}, timeout=timeout)


def canary_of(updater: int) -> Path | None:
    """The canary directory of the updater with pid ``updater``, once its gateway is started."""
    for owner in Path(tempfile.gettempdir()).glob("hermes-canary-*/owner.json"):
        try:
            record = json.loads(owner.read_text())
        except (OSError, ValueError):
            continue
        if record["updater"]["pid"] == updater and (owner.parent / "gateway.log").exists():
            return owner.parent
    return None


def processes_inside(work: Path) -> list[psutil.Process]:
    """Every process whose working directory lies inside ``work``."""
    inside = str(work) + os.sep
    return [p for p in psutil.process_iter(["cwd"]) if (p.info["cwd"] or "").startswith(inside)]


def serves_on(root: Path, profile: str, sha: str) -> bool:
    """Whether ``profile``'s gateway passes a probe turn on ``sha`` now."""
    try:
        return ask(root, profile, ops.TURN, PROBE, timeout=5.0)["code_sha"] == sha
    except RemoteError:
        return False  # between two processes


def mesh_up(install, profiles: tuple[str, ...]) -> None:
    """``profiles`` made, and their gateways forked from one gateway host under supervisord."""
    for name in profiles:
        assert install.hermes("profile", "create", name).returncode == 0
    up = install.hermes("mesh", "up", "--profiles", ",".join(profiles), "--json", timeout=180)
    assert up.returncode == 0, up.stdout + up.stderr


def update_under_turns(install, profiles: tuple[str, ...]) -> tuple[int, dict, dict[str, dict]]:
    """``hermes update --yes --json`` while every profile's gateway runs a turn it accepted
    before: its exit code, its report, and each turn's result once it finished."""
    with ThreadPoolExecutor(len(profiles)) as pool:
        held = {"text": "hold", "seconds": TURN_SECONDS}
        turns = {p: pool.submit(ask, install.root, p, ops.TURN, held) for p in profiles}
        for p in profiles:
            wait_for(
                lambda p=p: read_state(homes.profile_home(p, install.root))["active_turns"] == 1,
                timeout=WAIT,
                what=f"{p}'s turn to start",
            )
        code, report = install.hermes_json("update", "--yes")
        return code, report, {p: turn.result(timeout=WAIT) for p, turn in turns.items()}


def all_healthy(install, profiles: tuple[str, ...]) -> bool:
    """Whether ``hermes gateway status`` finds every profile's gateway healthy (its window: 1 s)."""
    code, status = install.hermes_json("gateway", "status", "--min-healthy", "1")
    health = {row["profile"]: (row.get("health") or {}).get("state") for row in status["gateways"]}
    return code == 0 and all(health.get(p) == "healthy" for p in profiles)


def receipt_of(report: dict) -> dict:
    return json.loads(Path(report["receipt"]).read_text())


def test_a_release_whose_first_turn_fails_never_reaches_a_live_gateway(install):
    mesh_up(install, PROFILES)
    canary_on(install)
    old = install.head()
    before = {p: read_state(homes.profile_home(p, install.root))["pid"] for p in PROFILES}
    install.release("release 2: every turn fails", edit=break_turns)

    code, report, answered = update_under_turns(install, PROFILES)

    assert code == 1, report
    assert report["outcome"] == "failed" and install.head() == old
    failure = report["failure"]
    assert (failure["step"], failure["profile"], failure["check"]) == ("canary", "p1", "turn")
    assert failure["reason"].endswith("its probe turn failed (internal_error)")
    assert "missing_at_turn_time" in failure["detail"]["detail"]["log"]  # the gateway's own account
    # No live gateway served the release: the same processes, never restarted, on the old code.
    for p in PROFILES:
        status = ask(install.root, p, ops.STATUS)
        assert (status["pid"], status["code_sha"]) == (before[p], old), p
        assert status["supervisor"] == "gateway_host", status  # forked by the host supervisord runs
        assert (answered[p]["profile"], answered[p]["text"]) == (p, "hold")  # every turn finished
    receipt = receipt_of(report)
    assert [s["name"] for s in receipt["steps"]][-1] == "canary"
    assert receipt["completion"] is None and receipt["followups"] == []
    staged = re.search(r"(/\S+/hermes-canary-[^/\s]+)/tree/", failure["detail"]["detail"]["log"])
    assert staged is not None and not Path(staged.group(1)).exists()  # the canary is gone


def test_a_sound_release_passes_its_canary_and_the_plan_shows_it(install):
    install.gateway("default")
    canary_on(install)
    new = install.release("release 2")

    code, plan = install.hermes_json("update", "--plan")
    assert code == 0
    assert (plan["canary"], plan["max_parallel"]) == ({"profile": "default"}, 0)
    assert any(a.startswith("canary, before the tree moves") for a in plan["actions"])

    code, report = install.hermes_json("update", "--yes")

    assert code == 0, report
    assert report["outcome"] == "success" and install.head() == new
    steps = {s["name"]: s for s in receipt_of(report)["steps"]}
    assert steps["canary"]["ok"] and steps["canary"]["detail"]["sha"] == new
    assert steps["canary"]["detail"]["profile"] == "default"
    assert [s["name"] for s in receipt_of(report)["steps"]].index("canary") < list(steps).index("moved")


def test_no_canary_moves_the_tree_without_one(install):
    install.gateway("default")
    canary_on(install)
    new = install.release("release 2: every turn fails", edit=break_turns)

    code, plan = install.hermes_json("update", "--plan", "--no-canary")
    assert (plan["canary"], plan["max_parallel"]) == ({"skip": "--no-canary"}, None)
    code, report = install.hermes_json("update", "--yes", "--no-canary")

    assert code == 0, report
    assert install.head() == new
    skips = {s["name"]: s["reason"] for s in receipt_of(report)["skips"]}
    assert skips["canary"] == "--no-canary"
    [row] = report["fleet"]
    assert row["health"]["state"] == "unhealthy"  # what the canary would have caught

    (install.root / "config.yaml").write_text("update:\n  canary: false\n")
    code, plan = install.hermes_json("update", "--plan")
    assert plan["canary"] is None  # up to date: nothing to gate
    install.release("release 3")
    code, plan = install.hermes_json("update", "--plan")
    assert plan["canary"] == {"skip": "update.canary is false"}


def canary_caught(install, signum: int) -> tuple[Path, list[psutil.Process], subprocess.Popen[str]]:
    """An update of a release whose canary hangs, its updater sent ``signum`` mid-canary: the
    canary's directory, its processes as they were, and the finished ``hermes update``."""
    install.gateway("default")
    canary_on(install)
    install.release("release 2: its canary hangs", edit=hang_the_canary)
    update = start_update(install)
    try:
        updater = updater_pid(install)
        wait_for(lambda: canary_of(updater) is not None, timeout=WAIT, what="the canary to start")
        work = canary_of(updater)
        assert work is not None
        wait_for(lambda: processes_inside(work) != [], timeout=WAIT, what="the canary's gateway")
        gateways = processes_inside(work)
        os.kill(updater, signum)
        update.wait(WAIT)
    finally:
        if update.poll() is None:
            update.kill()
    return work, gateways, update


def gone(processes: list[psutil.Process]) -> bool:
    return not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in processes)


def test_a_canary_left_by_a_killed_updater_is_removed_by_the_next_update(install):
    old = install.head()
    work, orphans, _ = canary_caught(install, signal.SIGKILL)
    assert not gone(orphans) and work.exists()  # left running by the killed updater
    assert install.head() == old

    code, report = install.hermes_json("update", "--yes", "--no-canary")

    assert code == 0, report
    assert not work.exists() and gone(orphans)
    recovered = [s["detail"] for s in receipt_of(report)["steps"] if s["name"] == "recover"]
    assert {"canaries": [str(work)]} in recovered


def test_a_stop_mid_canary_ends_the_run_interrupted_with_the_canary_gone(install):
    old = install.head()
    work, gateways, update = canary_caught(install, signal.SIGINT)  # as `kill -INT`, or a Ctrl-C passed on

    out, err = update.communicate(timeout=WAIT)
    assert update.returncode == 130, out + err
    assert json.loads(out)["outcome"] == "interrupted"
    assert install.head() == old and not work.exists() and gone(gateways)


def fail_turns_of(profile: str) -> Callable[[Path], None]:
    """A release whose gateways serve every profile but ``profile``, whose turns all fail."""

    def edit(dev: Path) -> None:
        fail = f'    if profile_scope.current().profile == "{profile}":\n        raise RuntimeError("broken for {profile}")\n'
        patch_release(dev / AGENT_TURN, WORK, WORK + fail)

    return edit


def test_a_release_whose_third_wave_fails_its_gate_is_rolled_back(install):
    mesh_up(install, PROFILES)
    (install.root / "config.yaml").write_text("update:\n  min_healthy: 1\n  max_parallel: 2\n")
    old = install.head()
    before = {p: read_state(homes.profile_home(p, install.root))["pid"] for p in PROFILES}
    new = install.release("release 2: p5's turns fail", edit=fail_turns_of("p5"))

    code, report, answered = update_under_turns(install, PROFILES)

    assert code == 1, report
    assert report["outcome"] == "rolled_back" and install.head() == old
    failure = report["failure"]
    assert (failure["step"], failure["profile"], failure["check"]) == ("gate", "p5", "turn")
    assert failure["detail"]["detail"]["wave"] == 3
    receipt = receipt_of(report)
    steps = [s["name"] for s in receipt["steps"]]
    assert steps.index("canary") < steps.index("moved") < steps.index("gate") < steps.index("revert")
    [revert] = [s for s in receipt["steps"] if s["name"] == "revert"]
    assert revert["detail"]["moved"] == ["p1", "p2", "p3", "p4", "p5", "p6"] and revert["detail"]["from"] == new
    # Back on the old commit, every profile; the fourth wave's gateways never moved.
    assert {row["profile"]: (row["verdict"], row["running"]) for row in report["fleet"]} == dict.fromkeys(
        PROFILES, ("current", old)
    )
    for p in PROFILES:
        status = ask(install.root, p, ops.STATUS)
        assert status["code_sha"] == old, p
        assert (status["pid"] == before[p]) == (p in ("p7", "p8")), p
        assert (answered[p]["profile"], answered[p]["text"]) == (p, "hold")  # no accepted turn lost
    wait_for(lambda: all_healthy(install, PROFILES), timeout=WAIT, what="every profile healthy on the old commit")
    assert receipt["followups"] == []

    # The commit is held back: the next update neither moves the code nor touches a gateway.
    after = {p: read_state(homes.profile_home(p, install.root))["pid"] for p in PROFILES}
    code, check = install.hermes_json("update", "--check")
    assert (code, check["update_available"]) == (0, False) and "rolled back by update" in check["reason"]
    code, again = install.hermes_json("update", "--yes")
    assert (code, again["outcome"]) == (2, "refused") and "rolled back by update" in again["refusal"]
    assert install.head() == old
    assert {p: read_state(homes.profile_home(p, install.root))["pid"] for p in PROFILES} == after
    # A release after it moves the fleet, and the hold is history.
    fixed = install.release("release 3: fixed", edit=lambda dev: git(dev, "checkout", old, "--", str(AGENT_TURN)))
    code, report = install.hermes_json("update", "--yes")
    assert (code, report["outcome"]) == (0, "success") and install.head() == fixed
    assert {row["health"]["state"] for row in report["fleet"]} == {"healthy"}  # every wave passed its gate


def test_an_updater_killed_between_the_revert_and_its_completion_is_finished_by_the_next_update(install):
    from services.updater import holder, read_completion, read_fleet

    profiles = ("p1", "p2")
    mesh_up(install, profiles)
    (install.root / "config.yaml").write_text("update:\n  min_healthy: 1\n  max_parallel: 1\n")
    old = install.head()
    new = install.release("release 2: p2's turns fail", edit=fail_turns_of("p2"))

    kill_updater_paused_at(install, "updater:reverted")

    # The tree is back; what the revert still had to do is owed: the old code's completion,
    # and a restart onto the old commit of every gateway (p1 and p2 still run the new one).
    assert install.head() == old and holder(install.root) is None
    owed = read_completion(install.root)
    assert owed is not None and (owed["before"], owed["after"]) == (new, old)
    assert {p: part["expected"] for p, part in read_fleet(install.root).items()} == dict.fromkeys(profiles, old)
    assert not serves_on(install.root, "p1", old)

    code, report = install.hermes_json("update", "--yes")

    # The next update does not take the reverted commit again; it finishes the revert.
    assert code == 2 and report["outcome"] == "refused", report
    assert install.head() == old and report["found_interrupted"]
    assert [r["owed"] for r in report["retried"]] == ["completion"]
    wait_for(lambda: all_healthy(install, profiles), timeout=WAIT, what="both profiles healthy")
    assert all(serves_on(install.root, p, old) for p in profiles)
