"""The canary, against a real origin, a real install, real gateways under a real supervisord:
before the tree moves, the fetched commit's own gateway serves a probe turn on a scratch copy of
a profile; a release that fails it never reaches a live gateway, and nothing is committed."""

from __future__ import annotations

import json
import os
import re
import signal
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from shared import homes
from shared.gateways import ops
from shared.transport.sync_client import SyncClient
from tests.e2e.test_update_health import break_turns
from tests.support.installs import start_update, updater_pid
from tests.support.processes import read_state, wait_for

PROFILES = tuple(f"p{n}" for n in range(1, 9))
WAIT = 60.0
TURN_SECONDS = 4.0  # long enough to be in flight through the whole canary


def canary_on(install, window: float) -> None:
    """The root's config.yaml with the canary on (the tests' installs turn it off)."""
    (install.root / "config.yaml").write_text(f"update:\n  min_healthy: {window:g}\n")


def ask(root: Path, profile: str, spec, args=None) -> dict:
    endpoint = homes.endpoint(homes.profile_home(profile, root), ops.SERVICE, create=False)
    with SyncClient(endpoint.control) as client:
        return client.call(spec, args or {}, timeout=WAIT)


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


def receipt_of(report: dict) -> dict:
    return json.loads(Path(report["receipt"]).read_text())


def test_a_release_whose_first_turn_fails_never_reaches_a_live_gateway(install):
    for name in PROFILES:
        assert install.hermes("profile", "create", name).returncode == 0
    up = install.hermes("mesh", "up", "--profiles", ",".join(PROFILES), "--json", timeout=180)
    assert up.returncode == 0, up.stdout + up.stderr
    canary_on(install, 1)
    old = install.head()
    before = {p: read_state(homes.profile_home(p, install.root))["pid"] for p in PROFILES}
    install.release("release 2: every turn fails", edit=break_turns)

    with ThreadPoolExecutor(len(PROFILES)) as pool:
        turns = {
            p: pool.submit(ask, install.root, p, ops.TURN, {"text": "hold", "seconds": TURN_SECONDS}) for p in PROFILES
        }
        for p in PROFILES:
            wait_for(
                lambda p=p: read_state(homes.profile_home(p, install.root))["active_turns"] == 1,
                timeout=WAIT,
                what=f"{p}'s turn to start",
            )
        code, report = install.hermes_json("update", "--yes")
        answered = {p: turn.result(timeout=WAIT) for p, turn in turns.items()}

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
    canary_on(install, 1)
    new = install.release("release 2")

    code, plan = install.hermes_json("update", "--plan")
    assert code == 0
    assert plan["canary"] == {"profile": "default", "window": 1.0}
    assert any(a.startswith("canary, before the tree moves") for a in plan["actions"])

    code, report = install.hermes_json("update", "--yes")

    assert code == 0, report
    assert report["outcome"] == "success" and install.head() == new
    steps = {s["name"]: s for s in receipt_of(report)["steps"]}
    assert steps["canary"]["ok"] and steps["canary"]["detail"]["sha"] == new
    assert steps["canary"]["detail"]["profile"] == "default" and steps["canary"]["detail"]["window"] == 1.0
    assert [s["name"] for s in receipt_of(report)["steps"]].index("canary") < list(steps).index("moved")


def test_no_canary_moves_the_tree_without_one(install):
    install.gateway("default")
    canary_on(install, 0)
    new = install.release("release 2: every turn fails", edit=break_turns)

    code, plan = install.hermes_json("update", "--plan", "--no-canary")
    assert plan["canary"] == {"skip": "--no-canary"}
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


def test_a_canary_left_by_a_killed_updater_is_removed_by_the_next_update(install):
    install.gateway("default")
    canary_on(install, 60)  # a canary that takes a minute to be healthy: killed well inside it
    old = install.head()
    install.release("release 2")
    update = start_update(install)
    try:
        updater = updater_pid(install)

        wait_for(lambda: canary_of(updater) is not None, timeout=WAIT, what="the canary to start")
        work = canary_of(updater)
        assert work is not None
        wait_for(lambda: processes_inside(work) != [], timeout=WAIT, what="the canary's gateway")
        os.kill(updater, signal.SIGKILL)
        update.wait(WAIT)
    finally:
        if update.poll() is None:
            update.kill()
    orphans = processes_inside(work)
    assert orphans and all(p.is_running() for p in orphans)  # left running by the killed updater
    assert install.head() == old

    code, report = install.hermes_json("update", "--yes", "--no-canary")

    assert code == 0, report
    assert not work.exists() and not any(p.is_running() and p.status() != "zombie" for p in orphans)
    recovered = [s["detail"] for s in receipt_of(report)["steps"] if s["name"] == "recover"]
    assert {"canaries": [str(work)]} in recovered


def test_a_stop_mid_canary_ends_the_run_interrupted_with_the_canary_gone(install):
    install.gateway("default")
    canary_on(install, 60)
    old = install.head()
    install.release("release 2")
    update = start_update(install)
    try:
        updater = updater_pid(install)
        wait_for(lambda: canary_of(updater) is not None, timeout=WAIT, what="the canary to start")
        work = canary_of(updater)
        assert work is not None
        wait_for(lambda: processes_inside(work) != [], timeout=WAIT, what="the canary's gateway")
        gateways = processes_inside(work)
        os.kill(updater, signal.SIGINT)  # as `kill -INT`, or a Ctrl-C the CLI passes on
        out, err = update.communicate(timeout=WAIT)
    finally:
        if update.poll() is None:
            update.kill()

    assert update.returncode == 130, out + err
    assert json.loads(out)["outcome"] == "interrupted"
    assert install.head() == old and not work.exists()
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in gateways)
