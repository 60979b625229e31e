"""``hermes update`` end to end: a real origin, a real install, real gateways.

The install is a clone of this repository's committed tree with its own origin; a second
clone plays the developer who pushes a new release. Gateways run the install's code (their
working directory and PYTHONPATH are the install), so the update must move them onto the
new commit; the completion must run from the new tree."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

from services.updater import obligations
from services.updater.completion_contract import dependency_digest
from services.updater.snapshot import SNAPSHOTS_DIR
from shared.gateways import ops
from shared.transport.sync_client import SyncClient
from tests.support.cli import HERMES, hermes
from tests.support.installs import Install, git, kill_updater_in_completion, start_update, updater_pid
from tests.support.processes import ROOT, python_env, read_state, wait_for
from tests.support.releases import before_completion_runs, bump_version, mark_completion


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
    assert (report["up_to_date"], report["failure"]) == (False, None)
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


def git_dir_times(repo: Path) -> dict[Path, int | None]:
    """Every path of ``repo``'s ``.git`` with its modification time. A file hard-linked from
    another repository (a local clone shares the object files) counts by its name alone: git
    freshens an object it writes again by touching its file, whichever repository wrote it."""
    return {
        p: None if (st := p.stat()).st_nlink > 1 and p.is_file() else st.st_mtime_ns
        for p in repo.joinpath(".git").rglob("*")
    }


def test_plan_changes_nothing_and_up_to_date_has_its_own_receipt(install):
    before = git_dir_times(install.path)
    plan = install.hermes("update", "--plan", "--json")
    assert plan.returncode == 0, plan.stderr
    assert git_dir_times(install.path) == before
    assert not (install.root / "logs").exists()
    result = install.hermes("update", "--yes", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["outcome"] == "success"
    assert (report["up_to_date"], report["failure"]) == (True, None)
    assert Path(report["receipt"]).exists()
    latest = json.loads(install.hermes("logs", "update", "--json").stdout)
    assert (latest["update_id"], latest["outcome"]) == (report["update_id"], "success")
    assert any(s["name"] == "completion" for s in latest["skips"])  # already up to date: nothing to hand over
    listed = json.loads(install.hermes("logs", "update", "--all", "--json").stdout)
    assert [r["update_id"] for r in listed["receipts"]] == [report["update_id"]]
    # Nothing running, and nothing starts: a refusal that names the latest, never that run as if followed.
    followed = install.hermes("logs", "update", "--follow", "--wait", "0.2", "--json")
    assert followed.returncode == 2, followed.stdout + followed.stderr
    error = json.loads(followed.stdout)["error"]
    assert (error["code"], error["detail"]["latest"]) == ("no_update_started", report["update_id"])
    text = install.hermes("update", "--yes")
    assert text.returncode == 0, text.stdout + text.stderr
    assert f"Already up to date ({install.head()[:12]})" in text.stdout.splitlines()


def test_a_no_op_snapshots_nothing_as_its_plan_says_unless_a_completion_is_owed(install):
    assert install.hermes("profile", "create", "coder").returncode == 0
    homes = [install.root, install.root / "profiles" / "coder"]

    def taken() -> list[str]:
        return sorted(
            p.name for home in homes if (home / SNAPSHOTS_DIR).is_dir() for p in (home / SNAPSHOTS_DIR).iterdir()
        )

    code, plan = install.hermes_json("update", "--plan")
    assert (code, plan["snapshot"]) == (0, False), plan
    assert not any("snapshot" in a for a in plan["actions"]), plan["actions"]
    result = install.hermes("update", "--yes", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert (report["outcome"], report["up_to_date"], report["retried"]) == ("success", True, [])
    receipt = json.loads(Path(report["receipt"]).read_text())
    assert receipt["snapshots"] is None and receipt["backup"] is None
    assert next(s["reason"] for s in receipt["skips"] if s["name"] == "snapshot").startswith("nothing will change")
    assert taken() == []

    # An owed completion migrates every config: then a run without a code change snapshots first.
    head = install.head()
    spec = dependency_digest(install.path)  # unchanged: the retry has no dependencies to sync
    obligations.arm_completion(install.root, update_id="u-owed", before=head, after=head, dependency_spec=spec)
    code, plan = install.hermes_json("update", "--plan")
    assert (code, plan["snapshot"], plan["owed_completion"]) == (0, True, "u-owed"), plan
    result = install.hermes("update", "--yes", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert (report["outcome"], report["up_to_date"]) == ("success", True)
    assert [(r["owed"], r["update_id"]) for r in report["retried"]] == [("completion", "u-owed")]
    receipt = json.loads(Path(report["receipt"]).read_text())
    assert sorted(s["profile"] for s in receipt["snapshots"]) == ["coder", "default"]
    assert taken() == sorted(Path(s["path"]).name for s in receipt["snapshots"])
    assert obligations.read_completion(install.root) is None


def test_a_follow_started_before_the_update_follows_that_update(install):
    assert install.hermes("update", "--yes", "--json").returncode == 0  # a previous run's receipt
    new = install.release("release 2")
    follower = subprocess.Popen(
        [*HERMES, "logs", "update", "--follow", "--json"],
        cwd=install.path,
        env=install.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # It has looked, found nothing running, and waits: only now does the update start.
        assert follower.stderr.readline().startswith("waiting up to 30s for an update to start")
        result = install.hermes("update", "--yes", "--json")
        assert result.returncode == 0, result.stdout + result.stderr
        report = json.loads(result.stdout)
        out, err = follower.communicate(timeout=120)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert follower.returncode == 0, out + err
    followed = json.loads(out)
    assert (followed["update_id"], followed["outcome"]) == (report["update_id"], "success")
    assert followed["after"]["code_sha"] == new == install.head()


def test_a_failed_update_says_in_json_which_step_failed_and_why_without_its_secret(install):
    token = "ghp_" + "A1b2" * 9
    git(
        install.path,
        "remote",
        "set-url",
        "origin",
        f"https://oauth2:{token}@127.0.0.1:9/hermes.git?access_token={token}",
    )
    result = install.hermes("update", "--yes", "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert (report["outcome"], report["up_to_date"]) == ("failed", False)
    failure = report["failure"]
    assert failure["step"] == "plan"
    assert (
        failure["reason"].startswith("cannot read the update target") and "access_token=[redacted]" in failure["reason"]
    )
    assert token not in result.stdout + result.stderr


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


def test_a_podman_image_is_refused_with_the_podman_command(install):
    # What an image holds: the committed tree, no .git; run in a Podman container (container=podman).
    image, tar = install.base / "image", install.base / "image.tar"
    git(install.path, "archive", "--format=tar", "-o", str(tar), "HEAD")
    with tarfile.open(tar) as archive:
        archive.extractall(image, filter="data")
    env = {**install.env(container="podman"), "PYTHONPATH": str(image)}
    text = hermes("update", "--yes", env=env, cwd=image, timeout=120)
    assert text.returncode == 2, text.stdout + text.stderr
    assert "podman-compose pull && podman-compose up -d" in text.stdout + text.stderr
    result = hermes("update", "--yes", "--json", env=env, cwd=image, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["outcome"] == "refused"
    receipt = json.loads(Path(report["receipt"]).read_text())
    assert "podman-compose pull && podman-compose up -d" in receipt["skips"][0]["reason"]
    assert report["refusal"] == receipt["skips"][0]["reason"] and "docker" not in report["refusal"]


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
    kill_updater_in_completion(install)
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
            f"# operator's settings\nupdate:\n  archive_url: {server.url('.tar.gz')}\n  canary: false\n"
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
        assert (report["failure"]["step"], report["failure"]["detail"]["code"]) == ("recover", "swap_recovery_needed")
        assert report["failure"]["reason"] == report["failure"]["detail"]["message"]
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
        (install.root / "config.yaml").write_text(f"update:\n  archive_url: {server.url('.tar.gz')}\n  canary: false\n")
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
