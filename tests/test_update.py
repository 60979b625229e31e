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

import pytest

from services.gateway import ops
from services.updater.completion import environment_owner
from shared.sync_client import SyncClient
from tests.conftest import ROOT, GatewayProcess, python_env, read_state, wait_for


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=dev", "-c", "user.email=dev@example.invalid", *args],
        cwd=cwd, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


class Install:
    def __init__(self, base: Path):
        self.origin = base / "origin.git"
        self.path = base / "install"
        self.dev = base / "dev"
        self.root = base / "home"
        self.gateways: list[GatewayProcess] = []
        git(base, "clone", "-q", "--bare", str(ROOT), str(self.origin))
        git(base, "clone", "-q", str(self.origin), str(self.path))
        git(base, "clone", "-q", str(self.origin), str(self.dev))
        self.root.mkdir()

    def env(self, **extra: str) -> dict[str, str]:
        env = python_env(HERMES_HOME=str(self.root), **extra)
        env["PYTHONPATH"] = str(self.path)  # the install's code, not this checkout's
        return env

    def head(self) -> str:
        return git(self.path, "rev-parse", "HEAD")

    def release(self, message: str, edit=None) -> str:
        (self.dev / "RELEASE").write_text(message)
        if edit:
            edit(self.dev)
        git(self.dev, "add", "-A")
        git(self.dev, "commit", "-qm", message)
        git(self.dev, "push", "-q", "origin", "HEAD")
        return git(self.dev, "rev-parse", "HEAD")

    def hermes(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "hermes_cli.main", *args],
            cwd=self.path, env=self.env(), capture_output=True, text=True, timeout=timeout,
        )

    def gateway(self, profile: str) -> GatewayProcess:
        if profile != "default":
            (self.root / "profiles" / profile).mkdir(parents=True, exist_ok=True)
        gateway = GatewayProcess(self.root, profile, env=self.env(), cwd=self.path)
        self.gateways.append(gateway)
        gateway.wait_running()
        return gateway


@pytest.fixture
def install(short_dir):
    built = Install(short_dir)
    yield built
    for gateway in built.gateways:
        gateway.kill()
    subprocess.run(
        [sys.executable, "-m", "hermes_cli.main", "mesh", "down"],
        cwd=built.path, env=built.env(), capture_output=True, timeout=120,
    )


def mark_completion(dev: Path) -> None:
    """A release whose completion says so in its result: proof it ran from the new tree."""
    path = dev / "services" / "updater" / "completion.py"
    text = path.read_text()
    text = text.replace(
        '"completion": {"pid": me.pid, "start_time": me.start_time, "code_sha": code_sha()},',
        '"completion": {"pid": me.pid, "start_time": me.start_time, "code_sha": code_sha(), "marker": "new-tree"},',
    )
    path.write_text(text)


def test_update_moves_every_gateway_onto_the_new_commit(install):
    for name in ("coder", "writer"):
        assert install.hermes("profile", "create", name).returncode == 0
    up = install.hermes("mesh", "up", "--profiles", "coder,writer", "--json", timeout=120)
    assert up.returncode == 0, up.stderr
    unmanaged = install.gateway("default")
    old = install.head()
    supervised_before = {p: read_state(install.root / "profiles" / p)["pid"] for p in ("coder", "writer")}

    new = install.release("release 2", edit=mark_completion)
    result = install.hermes("update", "--yes", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["outcome"] == "success"
    assert install.head() == new != old
    assert {(row["profile"], row["verdict"]) for row in report["fleet"]} == {
        ("default", "current"), ("coder", "current"), ("writer", "current")
    }
    receipt = json.loads(Path(report["receipt"]).read_text())
    assert receipt["outcome"] == "success" and receipt["exit_code"] == 0
    assert receipt["completion"]["marker"] == "new-tree"  # the completion ran the NEW code
    assert receipt["completion"]["code_sha"] == new
    assert receipt["before"]["code_sha"] == old and receipt["after"]["code_sha"] == new
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
    holder = subprocess.Popen([sys.executable, "-c", program, str(install.root)], cwd=ROOT, env=python_env(), stdout=subprocess.PIPE)
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
        path = dev / "services" / "updater" / "completion.py"
        path.write_text(path.read_text().replace("    result = Completion(request).run()", "    os._exit(9)\n    result = Completion(request).run()").replace("import argparse", "import argparse\nimport os"))

    new = install.release("release with a broken completion", edit=crash_completion)
    result = install.hermes("update", "--yes", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert install.head() == new
    assert report["outcome"] == "success"
    assert [f["step"] for f in report["followups"]] == ["completion"]


def test_an_install_that_is_not_updated_in_place_is_refused_with_the_right_command(install):
    result = subprocess.run(
        [sys.executable, "-m", "hermes_cli.main", "update", "--yes", "--json"],
        cwd=install.path, env=install.env(HERMES_INSTALL_KIND="docker"), capture_output=True, text=True, timeout=120,
    )
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
        [sys.executable, "-m", "hermes_cli.main", "update", "--yes"],
        cwd=install.path, env=install.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
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
    from tests.archive_origin import ArchiveOrigin

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
        # An archive cannot say whether the dependency spec changed, but the test interpreter's
        # environment belongs to this checkout, not to the install: owed, never re-pointed.
        [owed] = report["followups"]
        assert owed["step"] == "dependencies" and "by hand" in owed["reason"]
        assert environment_owner() is not None and environment_owner().resolve() == ROOT.resolve()
    finally:
        server.close()
