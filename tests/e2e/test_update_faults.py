"""``hermes update`` under faults, with real processes: an updater SIGKILLed at every stage
boundary and a completion killed mid-restart, each followed by the run that repairs it;
three updates started at once; a release on which one profile's gateway cannot start.

Every kill lands at an exact point, with no timing involved: the install's git runs its
upload-pack and its post-merge hook through gates this file holds (the plan's ls-remote, the
apply's fetch, the fast-forward that has just moved the tree), the receipt store's lock holds
the updater at a stage boundary's receipt write, and the release's completion waits on a
file. Each gate says when it holds; the process is killed only then, and whatever it leaves
behind (git, a gate, an orphaned completion) is let go and waited for before the repair.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from services.updater import obligations
from services.updater.lock import holder
from services.updater.snapshot import MANIFEST, SNAPSHOTS_DIR
from shared.files import lock_path_for, locked
from tests.support.cli import HERMES
from tests.support.installs import Install, git, owed_warnings, start_update
from tests.support.processes import gone, holds_open, kill, read_state, wait_for
from tests.support.releases import hold_completion, mark_completion, patch_release

WAIT = 120  # generous bounds on waits for real processes; nothing asserts on time

UPLOAD_PACK = """#!/bin/sh
# git upload-pack, gated: call N holds while hold-upload-pack-N exists.
gates='{gates}'
echo . >> "$gates/upload-pack-calls"
n=$(wc -l < "$gates/upload-pack-calls" | tr -d ' ')
if [ -e "$gates/hold-upload-pack-$n" ]; then
    echo "$$" > "$gates/.holding-$$" && mv "$gates/.holding-$$" "$gates/holding-upload-pack-$n"
    while [ -e "$gates/hold-upload-pack-$n" ]; do sleep 0.05; done
fi
exec git upload-pack "$@"
"""

POST_MERGE = """#!/bin/sh
# Runs once the fast-forward has moved HEAD and the tree, before git merge returns.
gates='{gates}'
if [ -e "$gates/hold-post-merge" ]; then
    echo "$$" > "$gates/.holding-$$" && mv "$gates/.holding-$$" "$gates/holding-post-merge"
    while [ -e "$gates/hold-post-merge" ]; do sleep 0.05; done
fi
"""


class Gates:
    """The install's git, gated. Per update, upload-pack call 1 is the plan's ls-remote and
    call 2 the apply's fetch (``upload-pack-N``); ``post-merge`` runs after the tree moved."""

    def __init__(self, install: Install):
        self.dir = install.root.parent / "gates"
        self.dir.mkdir()
        wrapper = self.dir / "upload-pack"
        wrapper.write_text(UPLOAD_PACK.format(gates=self.dir))
        wrapper.chmod(0o755)
        git(install.path, "config", "remote.origin.uploadpack", str(wrapper))
        hook = install.path / ".git" / "hooks" / "post-merge"
        hook.write_text(POST_MERGE.format(gates=self.dir))
        hook.chmod(0o755)

    def hold(self, gate: str) -> None:
        (self.dir / f"hold-{gate}").touch()

    def wait_holding(self, gate: str) -> None:
        wait_for((self.dir / f"holding-{gate}").exists, timeout=WAIT, what=f"gate {gate} to hold")

    def release(self, gate: str) -> None:
        (self.dir / f"hold-{gate}").unlink()


class Update:
    """``hermes update --yes`` in the background; its plain progress lines (stderr is a pipe,
    so every event is a line ``  <stage> <status> <detail>``) are collected as they come."""

    def __init__(self, install: Install, *args: str):
        self.proc = subprocess.Popen(
            [*HERMES, "update", "--yes", *args],
            cwd=install.path,
            env=install.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stderr: list[str] = []
        self.events: list[tuple[str, str, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line)
            parts = line.split(maxsplit=2)
            if line.startswith("  ") and len(parts) >= 2:
                self.events.append((parts[0], parts[1], parts[2].strip() if len(parts) > 2 else ""))

    def seen(self, stage: str, status: str) -> bool:
        return any(event[:2] == (stage, status) for event in list(self.events))

    def wait_event(self, stage: str, status: str) -> str:
        """The detail of the first ``stage status`` event, once it has come."""
        found = wait_for(
            lambda: next((e for e in list(self.events) if e[:2] == (stage, status)), None),
            timeout=WAIT,
            what=f"progress `{stage} {status}`",
        )
        return found[2]

    def finish(self) -> tuple[int, str, str]:
        code = self.proc.wait(timeout=WAIT)
        self._reader.join(timeout=WAIT)
        return code, self.proc.stdout.read(), "".join(self.stderr)


def receipts(install: Install) -> list[dict]:
    """The receipt trail, newest first, as `hermes logs update --all` lists it."""
    listed = install.hermes("logs", "update", "--all", "--json")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    data = json.loads(listed.stdout)
    assert data["unreadable"] == []
    return data["receipts"]


def snapshots(install: Install, profiles: list[str]) -> dict[str, list[str]]:
    """profile -> the entries of its ``state-snapshots/``."""
    from shared import homes

    found = {}
    for profile in profiles:
        directory = homes.profile_home(profile, install.root) / SNAPSHOTS_DIR
        found[profile] = sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
    return found


def running_on(install: Install, profile: str, code: str) -> bool:
    from shared import homes
    from shared.identity import ProcessIdentity, is_alive

    state = read_state(homes.profile_home(profile, install.root))
    return (
        bool(state)
        and (state["gateway_state"], state["code_sha"]) == ("running", code)
        and is_alive(ProcessIdentity.from_dict(state))
    )


def hold_restart(dev: Path) -> None:
    """A release whose completion, once a gateway has answered its drain (or re-exec), waits
    while ``<root>/hold-restart`` exists, saying so in ``<root>/restart-holding-<profile>``."""
    hold = (
        "    import os, time\n"
        "    from pathlib import Path\n"
        "    gate = Path(os.environ['HERMES_HOME']) / 'hold-restart'\n"
        "    if gate.exists():\n"
        "        (gate.parent / f'restart-holding-{gateway.profile}').touch()\n"
        "        while gate.exists():\n"
        "            time.sleep(0.05)\n"
    )
    anchor = (
        "    new_pid, reason = wait_for_fresh(gateway, address, expected_sha, waits, reexec=reexec, gave_up=gave_up)\n"
    )
    patch_release(dev / "services" / "updater" / "restart" / "base.py", anchor, hold + anchor)


def fault_release(dev: Path) -> None:
    mark_completion(dev)
    hold_completion(dev)
    hold_restart(dev)


PROFILES = ["default", "a", "b"]
BEFORE_THE_COMMIT_POINT = {"plan", "snapshot", "apply"}


@pytest.mark.slow
@pytest.mark.parametrize("point", ["plan", "snapshot", "apply", "moved", "completion", "completion-process"])
def test_a_kill_at_any_stage_is_repaired_by_the_next_update(install, point):
    for name in ("a", "b"):
        assert install.hermes("profile", "create", name).returncode == 0
    up = install.hermes("mesh", "up", "--programs", "--profiles", "a,b", timeout=WAIT)
    assert up.returncode == 0, up.stdout + up.stderr
    install.gateway("default")  # unmanaged: it re-executes itself onto new code
    gates = Gates(install)
    old = install.head()
    new = install.release(f"release killed at {point}", edit=fault_release)
    receipts_dir = install.root / "logs" / "update_receipts"
    receipts_dir.mkdir(parents=True)

    if point == "plan":
        gates.hold("upload-pack-1")
    elif point == "apply":
        gates.hold("upload-pack-2")
    elif point == "snapshot":
        gates.hold("upload-pack-1")  # only to hold the updater still while the receipt lock is taken
    elif point == "moved":
        gates.hold("post-merge")
    elif point == "completion":
        (install.root / "hold-completion").touch()
    else:
        (install.root / "hold-restart").touch()
    update = Update(install)

    if point == "plan":
        update.wait_event("plan", "start")
        gates.wait_holding("upload-pack-1")  # inside the plan: its ls-remote
        victim = holder(install.root)["pid"]
        orphans = kill(victim)
        gates.release("upload-pack-1")
    elif point == "snapshot":
        gates.wait_holding("upload-pack-1")
        victim = holder(install.root)["pid"]
        latest = receipts_dir / "latest.json"
        with locked(latest):  # the plan ends; the snapshot stage's first act is its receipt write
            gates.release("upload-pack-1")
            wait_for(lambda: holds_open(victim, lock_path_for(latest)), timeout=WAIT, what="the snapshot boundary")
            update.wait_event("plan", "done")
            orphans = kill(victim)
    elif point == "apply":
        update.wait_event("fetch", "start")
        gates.wait_holding("upload-pack-2")  # before the commit point: apply's fetch
        victim = holder(install.root)["pid"]
        orphans = kill(victim)
        gates.release("upload-pack-2")
    elif point == "moved":
        update.wait_event("apply", "moving")
        gates.wait_holding("post-merge")  # HEAD and the tree have moved; git merge has not returned
        assert install.head() == new
        victim = holder(install.root)["pid"]
        orphans = kill(victim)
        gates.release("post-merge")
    elif point == "completion":
        update.wait_event("completion", "started")
        wait_for((install.root / "completion-holding").exists, timeout=WAIT, what="the completion to hold")
        victim = holder(install.root)["pid"]
        orphans = kill(victim)
        (install.root / "hold-completion").unlink()  # the orphaned completion goes on, holding the lock
    else:
        victim = int(update.wait_event("completion", "started").removeprefix("pid="))  # the completion
        for profile in PROFILES:  # every gateway has left (drained, or re-executing)
            wait_for((install.root / f"restart-holding-{profile}").exists, timeout=WAIT, what=f"{profile}'s restart")
        orphans = kill(victim)
        (install.root / "hold-restart").unlink()
    for pid in orphans:
        wait_for(lambda p=pid: gone(p), timeout=WAIT, what=f"orphan {pid} to finish")
    wait_for(lambda: holder(install.root) is None, timeout=WAIT, what="the update lock to be free")

    code, out, err = update.finish()
    [killed] = receipts(install)
    if point == "completion-process":
        # The updater lived: the completion that died without a result is owed, exit 0.
        assert code == 0, out + err
        assert (killed["outcome"], killed["exit_code"]) == ("success", 0)
        assert [f["step"] for f in killed["followups"]] == ["completion", "fleet-restart"]
    else:
        assert code == 130, out + err  # the follower saw its updater die mid-run
        assert (killed["outcome"], killed["pid"]) == ("running", victim)  # as it was left: the repair marks it
    # Where it died: the last stage it announced.
    stage_at_kill = {
        "plan": ("plan", "start"),
        "snapshot": ("plan", "done"),
        "apply": ("fetch", "start"),
        "moved": ("apply", "moving"),
        "completion": ("completion", "started"),
    }
    if point in stage_at_kill:
        assert update.events[-1][:2] == stage_at_kill[point], update.events
    if point in BEFORE_THE_COMMIT_POINT:
        assert install.head() == old
        assert obligations.read_completion(install.root) is None and obligations.read_fleet(install.root) == {}
        assert owed_warnings(install) == []
    else:
        assert install.head() == new
        pending = obligations.read_completion(install.root)
        assert pending is not None, "the tree moved, so a completion is owed"
        assert (pending["update_id"], pending["before"], pending["after"]) == (killed["update_id"], old, new)
        assert set(obligations.read_fleet(install.root)) == set(PROFILES)  # only a verify clears a part
        assert owed_warnings(install) == ["⚠ 3 gateways still run old code (a, b, default): run `hermes update`"]
    # The killed run's snapshots: every profile's, or none (it died before the snapshot stage).
    taken = {
        p: [n for n in names if n.endswith("_" + killed["update_id"])]
        for p, names in snapshots(install, PROFILES).items()
    }
    assert all(len(names) == (0 if point in ("plan", "snapshot") else 1) for names in taken.values()), taken

    if point == "completion-process":
        # Its gateways had left when it died; their supervisor (or their own re-exec) brings
        # them back, on the new code. The repair runs once they are back: a gateway still on
        # its way up is rightly owed, and is not what this test is about.
        wait_for(
            lambda: all(running_on(install, p, new) for p in PROFILES), timeout=WAIT, what="the fleet to come back"
        )

    # The repair.
    repair = install.hermes("update", "--yes", "--json")
    assert repair.returncode == 0, repair.stdout + repair.stderr
    report = json.loads(repair.stdout)
    assert report["outcome"] == "success" and report["followups"] == []
    assert report["found_interrupted"] == ([] if point == "completion-process" else [killed["update_id"]])
    if point in BEFORE_THE_COMMIT_POINT:
        assert report["retried"] == []
    else:
        how = "adopted" if point == "completion" else "re-run"
        assert [(r["owed"], r["update_id"], r["how"]) for r in report["retried"]] == [
            ("completion", killed["update_id"], how)
        ]
    assert install.head() == new
    assert report["after"]["code_sha"] == new
    assert [(row["profile"], row["running"], row["verdict"]) for row in report["fleet"]] == [
        (profile, new, "current") for profile in PROFILES
    ]
    receipt = json.loads(Path(report["receipt"]).read_text())
    assert receipt["completion"]["marker"] == "new-tree" and receipt["completion"]["code_sha"] == new
    assert obligations.read_completion(install.root) is None and obligations.read_fleet(install.root) == {}
    assert owed_warnings(install) == []

    # The trail: the killed run is interrupted (never left running), the repair a success.
    trail = receipts(install)
    assert [(r["update_id"], r["outcome"]) for r in trail] == [
        (report["update_id"], "success"),
        (killed["update_id"], "success" if point == "completion-process" else "interrupted"),
    ]
    if point != "completion-process":
        assert trail[1]["exit_code"] == 130 and trail[1]["finished_at"] is not None
        assert trail[1]["steps"][-1]["name"] == "interrupted" and report["update_id"] in trail[1]["steps"][-1]["detail"]

    # Snapshots: one complete set, every profile's, from the repair (the older ones pruned).
    taken = {s["profile"]: Path(s["path"]) for s in receipt["snapshots"]}
    assert set(taken) == set(PROFILES)
    for profile, names in snapshots(install, PROFILES).items():
        assert names == [taken[profile].name] and names[0].endswith("_" + report["update_id"]), (profile, names)
        manifest = json.loads((taken[profile] / MANIFEST).read_text())
        assert (manifest["profile"], manifest["update_id"]) == (profile, report["update_id"])

    # The lock is free: a third run is not refused, and finds nothing owed.
    assert holder(install.root) is None
    third = install.hermes("update", "--yes", "--json")
    assert third.returncode == 0, third.stdout + third.stderr
    again = json.loads(third.stdout)
    assert (again["outcome"], again["found_interrupted"], again["retried"], again["followups"]) == (
        "success",
        [],
        [],
        [],
    )
    assert [r["outcome"] for r in receipts(install)][:2] == ["success", "success"]
    assert not any(r["outcome"] == "running" for r in receipts(install))


def test_a_gateway_whose_code_cannot_be_read_stays_owed(install):
    assert install.hermes("profile", "create", "x").returncode == 0
    wedged = install.gateway("x")
    head = install.head()
    # What an earlier update left owed: a restart of x onto the code now on disk.
    obligations.replace_fleet(
        install.root, {"x": obligations.owed_part(head, obligations.NOT_RESTARTED, "not restarted yet", "earlier")}
    )
    # x lives, but says nothing of what it runs (as a gateway caught mid-start): no socket to
    # answer, no state file naming it; only the process scan finds it.
    os.unlink(wedged.endpoint.control.removeprefix("ipc://"))
    os.unlink(wedged.home / "gateway_state.json")

    result = install.hermes("update", "--yes", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert [(row["profile"], row["source"], row["verdict"]) for row in report["fleet"]] == [("x", "scan", "unknown")]
    assert [(f["step"], f["reason"]) for f in report["followups"]] == [("fleet-restart", "gateway x is unknown")]
    assert set(obligations.read_fleet(install.root)) == {"x"}  # not seen on the new code: still owed
    assert owed_warnings(install) == ["⚠ 1 gateway still runs old code (x): run `hermes update`"]

    wedged.kill()
    install.gateway("x")
    result = install.hermes("update", "--yes", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert [(row["profile"], row["verdict"]) for row in report["fleet"]] == [("x", "current")]
    assert report["followups"] == [] and obligations.read_fleet(install.root) == {}
    assert owed_warnings(install) == []


def test_a_move_that_fails_after_arming_ahead_owes_again_exactly_what_was_owed(install):
    install.gateway("default")
    old = install.head()
    install.release("release adding a file", edit=lambda dev: (dev / "ADDED").write_text("upstream\n"))
    (install.path / "ADDED").write_text("the operator's, untracked\n")  # in the fast-forward's way
    # Owed before this run: a completion and a restart, left by an earlier update.
    obligations.arm_completion(install.root, update_id="earlier", before="a" * 40, after=old)
    owed_fleet = {"default": obligations.owed_part(old, obligations.STALE, "runs " + "a" * 12, "earlier")}
    obligations.replace_fleet(install.root, owed_fleet)

    update = Update(install)
    code, out, err = update.finish()
    assert code == 1, out + err
    assert update.seen("apply", "moving") and not update.seen("apply", "moved")  # armed ahead, then withdrawn
    [failed] = receipts(install)
    assert (failed["outcome"], failed["exit_code"]) == ("failed", 1)
    [apply] = [s for s in failed["steps"] if s["name"] == "apply"]
    assert not apply["ok"] and apply["detail"]["detail"]["stage"] == "merge"
    assert install.head() == old
    pending = obligations.read_completion(install.root)
    assert (pending["update_id"], pending["before"], pending["after"]) == ("earlier", "a" * 40, old)
    assert obligations.read_fleet(install.root) == owed_fleet


def test_three_updates_at_once_one_runs_and_the_others_are_refused_naming_it(install):
    gateway = install.gateway("default")
    new = install.release("release 2", edit=mark_completion)
    runs = [start_update(install) for _ in range(3)]
    done = [(run.returncode, out, err) for run in runs for out, err in [run.communicate(timeout=WAIT)]]
    assert sorted(code for code, _, _ in done) == [0, 2, 2], done
    [(_, winner_out, _)] = [d for d in done if d[0] == 0]
    winner = json.loads(winner_out)
    assert winner["outcome"] == "success"
    assert [(row["profile"], row["verdict"]) for row in winner["fleet"]] == [("default", "current")]
    receipt = json.loads(Path(winner["receipt"]).read_text())
    for code, out, err in done:
        if code == 2:
            error = json.loads(out)["error"]
            assert error["code"] == "update_in_progress", out + err
            assert (error["detail"]["pid"], error["detail"]["update_id"]) == (receipt["pid"], winner["update_id"])
            assert f"pid {receipt['pid']}" in error["message"]
    # The refused runs began nothing: no receipt of theirs, one update in the trail.
    assert [(r["update_id"], r["outcome"]) for r in receipts(install)] == [(winner["update_id"], "success")]
    assert install.head() == new and holder(install.root) is None
    # The gateway was restarted once, by the one update that ran; a restart that was asked for
    # is not counted by its storm breaker, and spent the mark it left.
    assert [(r["profile"], r["ok"]) for r in receipt["restart"]] == [("default", True)]
    record = json.loads((gateway.home / "gateway_starts.json").read_text())
    assert (set(record), len(record["starts"])) == ({"starts"}, 1)
    assert read_state(gateway.home)["code_sha"] == new


def test_a_gateway_that_never_comes_back_is_down_and_stays_owed(install):
    def refuse_c(dev: Path) -> None:
        """The new gateway code cannot serve profile c: it exits 78 at start."""
        path = dev / "services" / "gateway" / "__main__.py"
        guard = "import os\nif os.path.basename(os.environ.get('HERMES_HOME', '').rstrip('/')) == 'c':\n    raise SystemExit(78)\n"
        path.write_text(guard + path.read_text())

    for name in ("a", "b", "c"):
        assert install.hermes("profile", "create", name).returncode == 0
    up = install.hermes("mesh", "up", "--programs", "--profiles", "a,b,c", timeout=WAIT)
    assert up.returncode == 0, up.stdout + up.stderr
    before = {p: read_state(install.root / "profiles" / p)["pid"] for p in ("a", "b", "c")}
    new = install.release("release that cannot serve c", edit=refuse_c)

    result = install.hermes("update", "--yes", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["outcome"] == "success" and install.head() == new
    assert [(row["profile"], row["verdict"]) for row in report["fleet"]] == [
        ("a", "current"),
        ("b", "current"),
        ("c", "down"),
    ]
    restarted = {r["profile"]: r for r in json.loads(Path(report["receipt"]).read_text())["restart"]}
    # The follow-up says why, in the words of c's failed restart.
    why = f"gateway c is down: {restarted['c']['reason']}"
    assert [(f["step"], f["reason"]) for f in report["followups"]] == [("fleet-restart", why)]
    for profile in ("a", "b"):  # drained; supervisord started the new code
        assert restarted[profile]["ok"] and restarted[profile]["new_pid"] not in (None, before[profile])
        assert running_on(install, profile, new)
    assert not restarted["c"]["ok"] and restarted["c"]["old_pid"] == before["c"]
    assert restarted["c"]["reason"].startswith("supervisord gave up on it"), restarted["c"]  # not a 60 s wait
    assert obligations.read_completion(install.root) is None  # the completion itself delivered
    owed = obligations.read_fleet(install.root)
    assert {p: (part["state"], part["expected"]) for p, part in owed.items()} == {"c": (obligations.DOWN, new)}
    assert owed_warnings(install) == [
        "⚠ 1 gateway is not on the new code (c: down): run `hermes update`; "
        "start a down one with `hermes -p NAME gateway start`"
    ]


def kill_inside_the_merge(install: Install, gates: Gates) -> dict:
    """``hermes update`` SIGKILLed once the fast-forward has moved the tree, before git merge
    returns; its receipt, as it was left."""
    gates.hold("post-merge")
    update = Update(install)
    update.wait_event("apply", "moving")
    gates.wait_holding("post-merge")
    orphans = kill(holder(install.root)["pid"])
    gates.release("post-merge")
    for pid in orphans:
        wait_for(lambda p=pid: gone(p), timeout=WAIT, what=f"orphan {pid} to finish")
    wait_for(lambda: holder(install.root) is None, timeout=WAIT, what="the update lock to be free")
    code, out, err = update.finish()
    assert code == 130, out + err
    [killed] = receipts(install)
    return killed


def stashes(install: Install) -> list[str]:
    return git(install.path, "stash", "list", "--format=%H").split()


def operator_stash(install: Install, name: str) -> str:
    """A stash of the operator's own, of an edit to ``name``: its commit."""
    path = install.path / name
    path.write_text(path.read_text() + "\nthe operator's own, stashed\n")
    git(install.path, "stash", "push", "-q", "-m", f"mine: {name}")
    return stashes(install)[0]


@pytest.mark.slow
@pytest.mark.parametrize("conflicts", [False, True], ids=["applies", "conflicts"])
def test_a_local_change_stashed_by_an_updater_killed_inside_the_merge_is_put_back(install, conflicts):
    mine_before = operator_stash(install, "docs/architecture.md")
    readme = install.path / "README.md"
    original = readme.read_text()
    edited = original + "\nlocal operator note\n"  # a local change to a tracked file
    readme.write_text(edited)

    def upstream(dev: Path) -> None:
        if conflicts:  # the same spot: the change no longer applies
            (dev / "README.md").write_text(original + "\nupstream line\n")

    gates = Gates(install)
    new = install.release("release 2", edit=upstream)
    killed = kill_inside_the_merge(install, gates)

    # The tree moved and the change sits in a stash entry the record names by its commit.
    assert install.head() == new and readme.read_text() != edited
    owed = obligations.read_stash(install.root)
    assert owed is not None and owed["update_id"] == killed["update_id"] and owed["paths"] == ["README.md"]
    assert stashes(install) == [owed["sha"], mine_before]
    assert git(install.path, "show", f"{owed['sha']}:README.md") + "\n" == edited
    check = install.hermes("update", "--check", "--json")  # names it among what is owed
    assert check.returncode == 0, check.stdout + check.stderr
    assert json.loads(check.stdout)["owed"]["stash"]["sha"] == owed["sha"]
    # The operator stashes something else in between: the entry is no longer stash@{0}.
    mine_after = operator_stash(install, "docs/testing.md")
    assert stashes(install) == [mine_after, owed["sha"], mine_before]

    repair = install.hermes("update", "--yes", "--json")
    report = json.loads(repair.stdout)
    assert report["found_interrupted"] == [killed["update_id"]]
    retried = {r["owed"]: r for r in report["retried"]}
    assert (retried["completion"]["update_id"], retried["completion"]["how"]) == (killed["update_id"], "re-run")
    assert (retried["stash"]["update_id"], retried["stash"]["sha"]) == (killed["update_id"], owed["sha"])
    assert obligations.read_stash(install.root) is None
    if conflicts:
        assert repair.returncode == 1, repair.stdout + repair.stderr
        assert (report["outcome"], retried["stash"]["how"]) == ("partial", "parked")
        assert f"git stash apply {owed['sha']}" in report["user_action"]
        assert "stash@{1}" in report["user_action"] and "README.md" in report["user_action"]
        assert readme.read_text() == original + "\nupstream line\n"  # the new release's, no conflict markers
        assert git(install.path, "status", "--porcelain", "-uno") == ""
        assert stashes(install) == [mine_after, owed["sha"], mine_before]  # parked for the operator
    else:
        assert repair.returncode == 0, repair.stdout + repair.stderr
        assert (report["outcome"], report["user_action"], retried["stash"]["how"]) == ("success", None, "restored")
        assert readme.read_text() == edited
        assert stashes(install) == [mine_after, mine_before]
    assert install.head() == new and report["after"]["code_sha"] == new
    for sha, name in ((mine_before, "docs/architecture.md"), (mine_after, "docs/testing.md")):
        assert git(install.path, "show", f"{sha}:{name}").endswith("the operator's own, stashed")

    # Handed back or handed over: nothing is owed, and the next update says nothing of it.
    again = install.hermes("update", "--yes", "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    third = json.loads(again.stdout)
    assert (third["outcome"], third["retried"], third["user_action"]) == ("success", [], None)
    assert stashes(install) == ([mine_after, owed["sha"], mine_before] if conflicts else [mine_after, mine_before])
