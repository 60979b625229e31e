"""``hermes update`` end to end: a real origin, a real install, real gateways.

The install is a clone of this repository's committed tree with its own origin; a second
clone plays the developer who pushes a new release. Gateways run the install's code (their
working directory and PYTHONPATH are the install), so the update must move them onto the
new commit; the completion must run from the new tree.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from shared.gateways import ops
from shared.sync_client import SyncClient
from tests.support.cli import HERMES
from tests.support.installs import Install, git, owed_warnings
from tests.support.processes import ROOT, python_env, read_state, wait_for
from tests.support.releases import before_completion_runs, bump_version, hold_completion, mark_completion


def test_update_moves_every_gateway_onto_the_new_commit(install):
    for name in ("coder", "writer"):
        assert install.hermes("profile", "create", name).returncode == 0
    up = install.hermes("mesh", "up", "--profiles", "coder,writer", "--json", timeout=120)
    assert up.returncode == 0, up.stderr
    unmanaged = install.gateway("default")
    old = install.head()
    supervised_before = {p: read_state(install.root / "profiles" / p)["pid"] for p in ("coder", "writer")}

    versions = []
    new = install.release("release 2", edit=lambda dev: (mark_completion(dev), versions.append(bump_version(dev))))
    result = install.hermes("update", "--yes", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["outcome"] == "success"
    assert install.head() == new != old
    assert {(row["profile"], row["verdict"]) for row in report["fleet"]} == {
        ("default", "current"),
        ("coder", "current"),
        ("writer", "current"),
    }
    receipt = json.loads(Path(report["receipt"]).read_text())
    assert receipt["outcome"] == "success" and receipt["exit_code"] == 0
    assert receipt["completion"]["marker"] == "new-tree"  # the completion ran the NEW code
    assert receipt["completion"]["code_sha"] == new
    assert receipt["before"]["code_sha"] == old and receipt["after"]["code_sha"] == new
    # The new code's version, as the completion imported it: not the old updater's own.
    assert receipt["completion"]["code_version"] == receipt["after"]["code_version"] == versions[0]
    assert receipt["before"]["code_version"] != versions[0]
    # Supervised gateways are fresh processes; the unmanaged one re-executed itself.
    for profile, pid in supervised_before.items():
        assert read_state(install.root / "profiles" / profile)["pid"] != pid
    with SyncClient(unmanaged.endpoint.control) as client:
        status = client.call(ops.STATUS)
    assert (status["pid"], status["code_sha"]) == (unmanaged.pid, new)


def test_plan_changes_nothing_and_up_to_date_has_its_own_receipt(install):
    before = {p: p.stat().st_mtime_ns for p in install.path.joinpath(".git").rglob("*")}
    plan = install.hermes("update", "--plan", "--json")
    assert plan.returncode == 0, plan.stderr
    assert {p: p.stat().st_mtime_ns for p in install.path.joinpath(".git").rglob("*")} == before
    assert not (install.root / "logs").exists()
    result = install.hermes("update", "--yes", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["outcome"] == "success"
    assert Path(report["receipt"]).exists()
    latest = json.loads(install.hermes("logs", "update", "--json").stdout)
    assert (latest["update_id"], latest["outcome"]) == (report["update_id"], "success")
    assert any(s["name"] == "completion" for s in latest["skips"])  # already up to date: nothing to hand over
    listed = json.loads(install.hermes("logs", "update", "--all", "--json").stdout)
    assert [r["update_id"] for r in listed["receipts"]] == [report["update_id"]]
    followed = install.hermes("logs", "update", "--follow", "--json")  # nothing running: the latest receipt
    assert json.loads(followed.stdout)["update_id"] == report["update_id"]


def test_a_second_update_is_refused_while_one_runs(install):
    program = (
        "import sys, time; from pathlib import Path; from services.updater.lock import UpdateLock\n"
        "lock = UpdateLock(Path(sys.argv[1])); lock.acquire('other'); print('ready', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", program, str(install.root)], cwd=ROOT, env=python_env(), stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout.readline().strip() == b"ready"
        result = install.hermes("update", "--yes", "--json")
        assert result.returncode == 2
        assert json.loads(result.stdout)["error"]["code"] == "update_in_progress"
    finally:
        holder.kill()
        holder.wait()


def test_a_completion_that_dies_is_an_owed_followup_not_a_failure(install):
    def crash_completion(dev: Path) -> None:
        before_completion_runs(dev, "    os._exit(9)\n")

    versions = []
    new = install.release(
        "release with a broken completion", edit=lambda dev: (crash_completion(dev), versions.append(bump_version(dev)))
    )
    result = install.hermes("update", "--yes", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert install.head() == new
    assert report["outcome"] == "success"
    assert [f["step"] for f in report["followups"]] == ["completion"]
    receipt = json.loads(Path(report["receipt"]).read_text())
    assert receipt["completion"] is None  # no result: the new version is read from the new tree's files
    assert receipt["after"] == {"code_sha": new, "code_version": versions[0]}


def test_an_install_that_is_not_updated_in_place_is_refused_with_the_right_command(install):
    result = install.hermes("update", "--yes", "--json", timeout=120, HERMES_INSTALL_KIND="docker")
    assert result.returncode == 2, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["outcome"] == "refused"
    receipt = json.loads(Path(report["receipt"]).read_text())
    assert "docker compose pull" in receipt["skips"][0]["reason"]
    assert install.head() == git(install.path, "rev-parse", "HEAD")


def test_a_conflicting_autostash_is_parked_and_the_update_is_partial(install):
    target = install.path / "README.md"
    target.write_text(target.read_text() + "\nlocal operator note\n")  # a local change to a tracked file

    def upstream_edit(dev: Path) -> None:
        readme = dev / "README.md"
        readme.write_text(readme.read_text() + "\nupstream line\n")  # the same spot: the restore conflicts

    new = install.release("release touching README", edit=upstream_edit)
    result = install.hermes("update", "--yes", "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["outcome"] == "partial"
    assert install.head() == new  # committed: the code moved
    assert "stash" in report["user_action"]
    assert git(install.path, "stash", "list")  # the operator's change is kept, parked
    assert "<<<<<<<" not in target.read_text()


def test_an_updater_killed_mid_run_is_marked_interrupted_by_the_next_update(install):
    for name in ("coder",):
        assert install.hermes("profile", "create", name).returncode == 0
    assert install.hermes("mesh", "up", "--profiles", "coder").returncode == 0
    install.release("release 2")
    proc = subprocess.Popen(
        [*HERMES, "update", "--yes"],
        cwd=install.path,
        env=install.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Kill the updater (not the CLI) once the completion is running: after the commit point.
        def completion_started():
            line = proc.stderr.readline()
            return "completion" in line and "started" in line

        wait_for(completion_started, timeout=60, interval=0, what="the completion to start")
        from services.updater.lock import holder

        updater = holder(install.root)
        assert updater and updater["pid"]
        os.kill(updater["pid"], signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    # The orphaned completion shares the lock, so no second update starts before it finishes.
    wait_for(lambda: holder(install.root) is None, timeout=120, what="the orphaned completion to finish")
    second = install.hermes("update", "--yes", "--json")
    assert second.returncode == 0, second.stdout + second.stderr
    listed = json.loads(install.hermes("logs", "update", "--all", "--json").stdout)["receipts"]
    assert [r["outcome"] for r in listed] == ["success", "interrupted"]
    assert listed[1]["exit_code"] == 130


def test_when_git_fails_the_release_archive_is_installed_and_the_fleet_follows(install):
    from services.updater import obligations
    from tests.support.archive_origin import ArchiveOrigin

    server = ArchiveOrigin(install.origin)
    try:
        (install.root / "config.yaml").write_text(
            f"# operator's settings\nupdate:\n  archive_url: {server.url('.tar.gz')}\n"
        )
        built = install.path / "hermes_cli" / "web_dist" / "index.html"  # a live build output (ignored)
        built.parent.mkdir(parents=True)
        built.write_text("built\n")
        (install.path / ".gitignore").write_text((install.path / ".gitignore").read_text() + "web_dist/\n")
        git(install.path, "-c", "user.name=op", "-c", "user.email=op@example.invalid", "commit", "-qam", "ignore")
        git(install.path, "push", "-q", "origin", "HEAD")
        git(install.dev, "pull", "-q")
        install.gateway("default")
        old = install.head()
        new = install.release("release 2", edit=mark_completion)
        git(install.path, "remote", "set-url", "origin", str(install.origin.parent / "unreachable.git"))

        result = install.hermes("update", "--yes", "--json")
        assert result.returncode == 0, result.stdout + result.stderr
        report = json.loads(result.stdout)
        assert report["outcome"] == "success"
        assert [(row["profile"], row["verdict"]) for row in report["fleet"]] == [("default", "current")]
        receipt = json.loads(Path(report["receipt"]).read_text())
        applies = [s for s in receipt["steps"] if s["name"] == "apply"]
        assert [s["ok"] for s in applies] == [False, True]  # git failed, then the archive
        assert applies[0]["detail"]["code"] == "git_failed" and applies[1]["detail"]["via"] == "archive"
        assert receipt["apply"]["archive"]["carried"] == ["hermes_cli/web_dist"]
        assert receipt["completion"]["marker"] == "new-tree" and receipt["completion"]["code_sha"] == new
        assert receipt["after"]["code_sha"] == new and install.head() == old  # HEAD stays; the stamp speaks
        assert built.read_text() == "built\n"  # carried over by the swap
        assert len(server.requests) == 1
        # The archive's commit is not in the install's .git, so the commits cannot be diffed;
        # the spec's digest from before the swap says pyproject.toml did not change: nothing
        # to sync, nothing owed, and no later "already up to date" run re-runs the completion.
        assert report["followups"] == []
        skipped = [s["reason"] for s in receipt["skips"] if s["name"] == "dependencies"]
        assert skipped == ["the dependency spec did not change"]
        assert not any(s["name"] == "dependencies" for s in receipt["steps"])
        assert obligations.read_completion(install.root) is None
    finally:
        server.close()


def tree_of(path: Path) -> dict[str, tuple]:
    """The install's tree as a value, without the bytecode that running hermes from it writes."""
    from tests.support.archive_updates import manifest

    return {rel: what for rel, what in manifest(path).items() if "__pycache__" not in Path(rel).parts}


def crash_an_archive_update(install: Install, server) -> dict[str, tuple]:
    """An archive update of ``install`` killed mid-swap (git failing); the tree before it."""
    from tests.support.archive_updates import crash_mid_swap

    branch = git(install.path, "rev-parse", "--abbrev-ref", "HEAD")
    git(install.path, "remote", "set-url", "origin", str(install.origin.parent / "unreachable.git"))
    before = tree_of(install.path)
    crash_mid_swap(install.path, server.url(".tar.gz"), 3, branch)  # a top-level entry is missing
    assert tree_of(install.path) != before
    git(install.path, "remote", "set-url", "origin", str(install.origin))
    return before


def test_a_swap_cut_short_by_a_crash_is_rolled_back_before_git_fast_forwards(install):
    from tests.support.archive_origin import ArchiveOrigin

    server = ArchiveOrigin(install.origin)
    try:
        new = install.release("release 2")
        before = crash_an_archive_update(install, server)
        result = install.hermes("update", "--yes", "--json")
        assert result.returncode == 0, result.stdout + result.stderr
        report = json.loads(result.stdout)
        assert report["outcome"] == "success"
        receipt = json.loads(Path(report["receipt"]).read_text())
        [recovered] = [s for s in receipt["steps"] if s["name"] == "recover"]
        assert recovered["ok"] and recovered["detail"]["done"] == ["rolled back the interrupted swap of update u1"]
        assert receipt["apply"]["via"] == "git" and receipt["apply"]["stash"] == "none"
        assert install.head() == new and receipt["after"]["code_sha"] == new
        assert git(install.path, "stash", "list") == "" and git(install.path, "status", "--porcelain") == ""
        # The tree is the one before the crash, fast-forwarded: only the release's file is new.
        after = tree_of(install.path)
        assert after.pop("RELEASE")[:2] == ("file", b"release 2") and after == before
        assert not (install.path / ".git" / "hermes-update" / "u1").exists()
    finally:
        server.close()


def test_a_swap_cut_short_over_a_head_that_moved_since_fails_the_update_with_what_to_do(install):
    from tests.support.archive_origin import ArchiveOrigin

    server = ArchiveOrigin(install.origin)
    try:
        install.release("release 2")
        crash_an_archive_update(install, server)
        git(install.path, "commit", "-q", "--allow-empty", "-m", "work done after the crash")
        moved, after_crash = install.head(), tree_of(install.path)
        result = install.hermes("update", "--yes", "--json")
        assert result.returncode == 1, result.stdout + result.stderr
        report = json.loads(result.stdout)
        staging = install.path / ".git" / "hermes-update" / "u1"
        assert report["outcome"] == "failed" and str(staging) in report["user_action"]
        receipt = json.loads(Path(report["receipt"]).read_text())
        last = receipt["steps"][-1]
        assert last["name"] == "recover" and last["detail"]["code"] == "swap_recovery_needed"
        assert receipt["apply"] is None
        assert install.head() == moved and tree_of(install.path) == after_crash and (staging / "swap.json").exists()
    finally:
        server.close()


def test_sigint_during_an_archive_download_ends_the_update_interrupted(install):
    from services.updater import obligations
    from tests.support.archive_origin import ArchiveOrigin, Fault

    server = ArchiveOrigin(install.origin)
    try:
        (install.root / "config.yaml").write_text(f"update:\n  archive_url: {server.url('.tar.gz')}\n")
        server.faults.append(Fault(drip=0.2))  # a download that would outlast any test
        old = install.head()
        install.release("release 2")
        git(install.path, "remote", "set-url", "origin", str(install.origin.parent / "unreachable.git"))
        before = tree_of(install.path)
        proc = start_update(install)
        wait_for(lambda: server.requests, timeout=120, what="the archive download to start")
        os.kill(updater_pid(install), signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, out + err
        report = json.loads(out)
        assert report["outcome"] == "interrupted"
        receipt = json.loads(Path(report["receipt"]).read_text())
        last = receipt["steps"][-1]
        assert last["name"] == "interrupted" and "before the commit point" in last["detail"]
        assert install.head() == old and receipt["after"]["code_sha"] == old
        assert tree_of(install.path) == before
        staging = install.path / ".git" / "hermes-update"
        assert not staging.exists() or not any(staging.iterdir())
        assert obligations.read_completion(install.root) is None and obligations.read_fleet(install.root) == {}
    finally:
        server.close()


# --- what a committed update owes: armed, warned about, retried -------------------------------


def start_update(install: Install) -> subprocess.Popen:
    return subprocess.Popen(
        [*HERMES, "update", "--yes", "--json"],
        cwd=install.path,
        env=install.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def updater_pid(install: Install) -> int:
    from services.updater.lock import holder

    return wait_for(lambda: (holder(install.root) or {}).get("pid"), timeout=60, what="the updater to hold the lock")


def test_a_completion_that_died_is_run_again_by_the_next_update(install):
    from services.updater import obligations

    def crash_once(dev: Path) -> None:
        before_completion_runs(
            dev,
            (
                "    crashed = Path(request.root) / 'completion-crashed'\n"
                "    if not crashed.exists():\n"
                "        crashed.touch()\n"
                "        os._exit(9)\n"
            ),
        )

    gateway = install.gateway("default")
    old = install.head()
    new = install.release(
        "release whose completion dies once", edit=lambda dev: (crash_once(dev), mark_completion(dev))
    )
    first = install.hermes("update", "--yes", "--json")
    assert first.returncode == 0, first.stdout + first.stderr
    report = json.loads(first.stdout)
    assert report["outcome"] == "success"
    assert [f["step"] for f in report["followups"]] == ["completion", "fleet-restart"]  # what it leaves owed
    assert "⚠" not in first.stderr  # hermes update reports what it owes itself
    pending = obligations.read_completion(install.root)
    assert (pending["update_id"], pending["before"], pending["after"]) == (report["update_id"], old, new)
    assert obligations.read_fleet(install.root)["default"]["state"] == obligations.NOT_RESTARTED
    assert owed_warnings(install) == ["⚠ 1 gateway still runs old code (default): run `hermes update`"]
    check = install.hermes("update", "--check", "--json")  # says what is owed instead of warning
    assert check.returncode == 0 and "⚠" not in check.stderr
    owed = json.loads(check.stdout)["owed"]
    assert owed["completion"]["update_id"] == report["update_id"] and set(owed["fleet_restart"]) == {"default"}

    second = install.hermes("update", "--yes", "--json")  # already up to date: the owed completion runs
    assert second.returncode == 0, second.stdout + second.stderr
    repaired = json.loads(second.stdout)
    assert repaired["retried"] == [{"owed": "completion", "update_id": report["update_id"], "how": "re-run"}]
    assert repaired["followups"] == []
    assert [(row["profile"], row["verdict"]) for row in repaired["fleet"]] == [("default", "current")]
    receipt = json.loads(Path(repaired["receipt"]).read_text())
    assert receipt["completion"]["marker"] == "new-tree" and receipt["completion"]["code_sha"] == new
    assert obligations.read_completion(install.root) is None and obligations.read_fleet(install.root) == {}
    assert owed_warnings(install) == []
    with SyncClient(gateway.endpoint.control) as client:
        assert client.call(ops.STATUS)["code_sha"] == new


def test_sigint_before_the_commit_point_commits_nothing_and_owes_nothing(install):
    from services.updater import obligations
    from shared.files import locked

    old = install.head()
    install.release("release 2")
    receipts = install.root / "logs" / "update_receipts"
    receipts.mkdir(parents=True)
    with locked(receipts / "latest.json"):  # the updater waits on its first receipt write
        proc = start_update(install)
        os.kill(updater_pid(install), signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    report = json.loads(out)
    assert report["outcome"] == "interrupted" and report["exit_code"] == 130
    assert install.head() == old
    assert obligations.read_completion(install.root) is None and obligations.read_fleet(install.root) == {}
    receipt = json.loads(Path(report["receipt"]).read_text())
    assert receipt["apply"] is None and receipt["steps"][-1]["name"] == "interrupted"
    assert "before the commit point" in receipt["steps"][-1]["detail"]


def test_sigint_after_the_commit_point_keeps_what_is_owed_until_it_is_repaired(install):
    from services.updater import obligations

    for name in ("coder", "writer"):
        assert install.hermes("profile", "create", name).returncode == 0
    assert install.hermes("mesh", "up", "--profiles", "coder,writer", timeout=120).returncode == 0
    old = install.head()
    new = install.release("release 2", edit=hold_completion)
    hold = install.root / "hold-completion"
    hold.touch()
    proc = start_update(install)
    wait_for((install.root / "completion-holding").exists, timeout=120, what="the completion to start")
    os.kill(updater_pid(install), signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    report = json.loads(out)
    assert report["outcome"] == "interrupted" and install.head() == new
    assert [f["step"] for f in report["followups"]] == ["completion", "fleet-restart"]
    receipt = json.loads(Path(report["receipt"]).read_text())
    assert "after the commit point" in receipt["steps"][-1]["detail"]
    pending = obligations.read_completion(install.root)
    assert (pending["update_id"], pending["before"], pending["after"]) == (report["update_id"], old, new)
    owed = obligations.read_fleet(install.root)
    assert {p: (part["state"], part["expected"]) for p, part in owed.items()} == {
        "coder": (obligations.NOT_RESTARTED, new),
        "writer": (obligations.NOT_RESTARTED, new),
    }
    assert owed_warnings(install) == ["⚠ 2 gateways still run old code (coder, writer): run `hermes update`"]

    restarted = install.hermes("-p", "coder", "gateway", "restart", "--json")
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    assert json.loads(restarted.stdout)["owed_restart"] == {"cleared": True, "expected": new, "running": new}
    assert owed_warnings(install) == ["⚠ 1 gateway still runs old code (writer): run `hermes update`"]

    hold.unlink()
    second = install.hermes("update", "--yes", "--json")  # already up to date: the owed completion runs
    assert second.returncode == 0, second.stdout + second.stderr
    repaired = json.loads(second.stdout)
    assert repaired["retried"] == [{"owed": "completion", "update_id": report["update_id"], "how": "re-run"}]
    assert {(row["profile"], row["verdict"]) for row in repaired["fleet"]} == {
        ("coder", "current"),
        ("writer", "current"),
    }
    assert obligations.read_completion(install.root) is None and obligations.read_fleet(install.root) == {}
    assert owed_warnings(install) == []


def test_a_stopped_completion_takes_its_whole_process_group_along(install):
    import psutil

    def hang_with_a_grandchild(dev: Path) -> None:
        """A completion that starts a long sleep (a pip, say), names it, and hangs."""
        before_completion_runs(
            dev,
            (
                "    import time\n"
                "    grandchild = subprocess.Popen(['sleep', '600'])\n"
                "    named = Path(request.root) / 'grandchild.pid'\n"
                "    named.with_suffix('.tmp').write_text(str(grandchild.pid))\n"
                "    named.with_suffix('.tmp').rename(named)\n"
                "    while True:\n"
                "        time.sleep(0.05)\n"
            ),
        )

    install.release("release whose completion hangs over a grandchild", edit=hang_with_a_grandchild)
    named = install.root / "grandchild.pid"
    proc = start_update(install)
    grandchild = None
    try:
        wait_for(named.exists, timeout=120, what="the completion to start its grandchild")
        grandchild = int(named.read_text())
        assert psutil.pid_exists(grandchild)
        os.kill(updater_pid(install), signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, out + err
        assert [f["step"] for f in json.loads(out)["followups"]] == ["completion"]

        def gone() -> bool:
            try:
                return psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                return True

        wait_for(gone, timeout=30, what="the completion's grandchild to be stopped with it")
    finally:
        if proc.poll() is None:
            proc.kill()
        if grandchild is not None:
            try:
                if psutil.Process(grandchild).name() == "sleep":
                    os.kill(grandchild, signal.SIGKILL)
            except (psutil.NoSuchProcess, ProcessLookupError):
                pass


def test_a_completion_that_outlives_its_killed_updater_is_taken_by_the_next_update(install):
    from services.updater import obligations
    from services.updater.lock import holder

    assert install.hermes("profile", "create", "coder").returncode == 0
    assert install.hermes("mesh", "up", "--profiles", "coder", timeout=120).returncode == 0
    install.release("release 2", edit=hold_completion)
    hold = install.root / "hold-completion"
    hold.touch()
    proc = start_update(install)
    wait_for((install.root / "completion-holding").exists, timeout=120, what="the completion to start")
    os.kill(updater_pid(install), signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err  # the follower saw its updater die mid-run
    first = json.loads(out)
    assert first["outcome"] == "interrupted"
    hold.unlink()  # the orphaned completion restarts the fleet and writes its result
    wait_for(lambda: holder(install.root) is None, timeout=120, what="the orphaned completion to finish")
    coder = read_state(install.root / "profiles" / "coder")["pid"]

    second = install.hermes("update", "--yes")
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"update {first['update_id']} had been interrupted" in second.stdout
    assert f"update {first['update_id']}" in second.stderr and "was interrupted" in second.stderr
    latest = json.loads(install.hermes("logs", "update", "--json").stdout)
    steps = {s["name"]: s["detail"] for s in latest["steps"]}
    assert steps["found-interrupted"]["updates"] == [first["update_id"]]
    assert steps["retry"]["how"] == "adopted"  # its result counts: no second restart of the fleet
    assert read_state(install.root / "profiles" / "coder")["pid"] == coder
    listed = json.loads(install.hermes("logs", "update", "--all", "--json").stdout)["receipts"]
    assert [r["outcome"] for r in listed] == ["success", "interrupted"]
    assert obligations.read_completion(install.root) is None and obligations.read_fleet(install.root) == {}
    assert owed_warnings(install) == []


def test_a_gateway_that_cannot_come_back_is_owed_until_it_runs_the_new_code(install):
    from services.updater import obligations

    def refuse_start(dev: Path) -> None:
        """The new gateway code exits at start (78, not restarted) in a home holding ``refuse-start``."""
        path = dev / "services" / "gateway" / "__main__.py"
        guard = (
            "import os\nfrom pathlib import Path\n"
            "if (Path(os.environ.get('HERMES_HOME', '.')) / 'refuse-start').exists():\n"
            "    raise SystemExit(78)\n"
        )
        path.write_text(guard + path.read_text())

    for name in ("coder", "writer"):
        assert install.hermes("profile", "create", name).returncode == 0
    assert install.hermes("mesh", "up", "--profiles", "coder,writer", timeout=120).returncode == 0
    new = install.release("release 2", edit=lambda dev: (hold_completion(dev), refuse_start(dev)))
    hold = install.root / "hold-completion"
    hold.touch()
    proc = start_update(install)
    wait_for((install.root / "completion-holding").exists, timeout=120, what="the completion to start")
    writer = install.root / "profiles" / "writer"
    (writer / "refuse-start").touch()
    os.kill(read_state(writer)["pid"], signal.SIGKILL)  # its supervisor starts the new code, which exits
    hold.unlink()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    report = json.loads(out)
    assert {(row["profile"], row["verdict"]) for row in report["fleet"]} == {("coder", "current"), ("writer", "down")}
    assert [(f["step"], f["reason"]) for f in report["followups"]] == [("fleet-restart", "gateway writer is down")]
    assert obligations.read_completion(install.root) is None  # the completion itself delivered
    owed = obligations.read_fleet(install.root)
    assert {p: (part["state"], part["expected"]) for p, part in owed.items()} == {"writer": (obligations.DOWN, new)}
    [line] = owed_warnings(install)
    assert line.startswith("⚠ 1 gateway is not on the new code (writer: down)")

    again = install.hermes("update", "--yes", "--json")  # nothing can start it yet: still owed, not forgotten
    assert again.returncode == 0, again.stdout + again.stderr
    assert [f["step"] for f in json.loads(again.stdout)["followups"]] == ["fleet-restart"]
    assert set(obligations.read_fleet(install.root)) == {"writer"}

    (writer / "refuse-start").unlink()
    restarted = install.hermes("-p", "writer", "gateway", "restart", "--json")
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    assert json.loads(restarted.stdout)["owed_restart"] == {"cleared": True, "expected": new, "running": new}
    assert obligations.read_fleet(install.root) == {}
    assert owed_warnings(install) == []
