"""The update plan: a git checkout's install kind, the read-only git target, and a plan that
changes nothing."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from fleet.supervisors import detect_supervisor
from services.updater import obligations
from services.updater.git import GitFailed
from services.updater.git_target import git_target
from services.updater.install_kind import Probes, detect_install_kind
from services.updater.plan import make_plan
from services.updater.plan_text import render_plan
from tests.support.installs import git
from tests.support.processes import ROOT, python_env
from tests.support.updater import neutral_probes


def commit(repo: Path, name: str, text: str) -> str:
    (repo / name).write_text(text)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", f"write {name}")
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def origin(tmp_path: Path) -> tuple[Path, Path]:
    """A bare origin and a working clone of it that pushes (the upstream developer)."""
    bare = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    upstream = tmp_path / "upstream"
    git(tmp_path, "clone", "-q", str(bare), str(upstream))
    git(upstream, "checkout", "-q", "-b", "main")
    commit(upstream, "README", "one\n")
    git(upstream, "push", "-q", "origin", "main")
    return bare, upstream


@pytest.fixture
def install(tmp_path: Path, origin: tuple[Path, Path]) -> Path:
    """The install: a clone of the origin."""
    bare, _ = origin
    path = tmp_path / "install"
    git(tmp_path, "clone", "-q", str(bare), str(path))
    return path


# --- install kind ------------------------------------------------------------------------------


def test_git_checkout_is_updated_in_place(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    kind = detect_install_kind(repo, env={}, probes=neutral_probes(tmp_path))
    assert (kind.kind, kind.in_place, kind.external_command) == ("git", True, None)


def test_worktree_gitdir_file_is_git(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "commit", "-q", "--allow-empty", "-m", "one")
    git(repo, "worktree", "add", "-q", str(tmp_path / "wt"))
    assert (tmp_path / "wt" / ".git").is_file()
    assert detect_install_kind(tmp_path / "wt", env={}, probes=neutral_probes(tmp_path)).kind == "git"


def test_a_checkout_is_git_even_in_a_container_unless_the_deployment_says_docker(tmp_path):
    repo = tmp_path / "app"
    repo.mkdir()
    git(repo, "init", "-q")
    marker = tmp_path / ".dockerenv"
    marker.touch()
    probes = Probes(dockerenv=marker, nix_store=tmp_path / "nix", apt_roots=())
    in_a_dev_container = detect_install_kind(repo, env={"container": "docker"}, probes=probes)
    assert (in_a_dev_container.kind, in_a_dev_container.in_place) == ("git", True)
    declared = detect_install_kind(repo, env={"HERMES_INSTALL_KIND": "docker"}, probes=probes)
    assert (declared.kind, declared.in_place) == ("docker", False)
    plain = tmp_path / "plain"
    plain.mkdir()
    assert detect_install_kind(plain, env={}, probes=probes).kind == "docker"


# --- the git target ----------------------------------------------------------------------------


def test_up_to_date_clone(install):
    target = git_target(install, None, timeout=10)
    head = git(install, "rev-parse", "HEAD")
    assert target["current_branch"] == target["branch"] == "main"
    assert target["head"] == target["remote_sha"] == head
    assert target["up_to_date"] is True
    assert (target["ahead"], target["behind"]) == (0, 0)
    assert target["origin_url"].endswith("origin.git")
    assert (target["dirty"], target["untracked_count"]) == (False, 0)


def test_origin_moved_without_a_fetch(install, origin):
    _, upstream = origin
    new = commit(upstream, "README", "two\n")
    git(upstream, "push", "-q", "origin", "main")
    target = git_target(install, None, timeout=10)
    assert target["remote_sha"] == new != target["head"]
    assert target["up_to_date"] is False
    # The new commit was never fetched: how far behind is unknowable without a fetch.
    assert (target["ahead"], target["behind"]) == (None, None)
    assert git(install, "rev-parse", "origin/main") == target["head"]

    git(install, "pull", "-q", "--ff-only")
    again = git_target(install, None, timeout=10)
    assert again["head"] == again["remote_sha"] == new
    assert again["up_to_date"] is True


def test_ahead_behind_when_the_remote_commit_is_local(install, origin):
    _, upstream = origin
    commit(upstream, "README", "two\n")
    git(upstream, "push", "-q", "origin", "main")
    git(install, "fetch", "-q")
    target = git_target(install, None, timeout=10)
    assert (target["ahead"], target["behind"], target["up_to_date"]) == (0, 1, False)


def test_dirty_tracked_and_untracked(install):
    (install / "README").write_text("local edit\n")
    (install / "new dir").mkdir()
    (install / "new dir" / "a").write_text("x")
    (install / "b").write_text("x")
    target = git_target(install, None, timeout=10)
    assert target["dirty"] is True
    assert (target["dirty_count"], target["dirty_paths"]) == (1, ["README"])
    assert target["untracked_count"] == 2


def test_untracked_alone_is_not_dirty(install):
    (install / "scratch").write_text("x")
    target = git_target(install, None, timeout=10)
    assert (target["dirty"], target["untracked_count"]) == (False, 1)


def test_staged_rename_is_one_dirty_path(install):
    git(install, "mv", "README", "README.md")
    target = git_target(install, None, timeout=10)
    assert target["dirty_paths"] == ["README.md"]


def test_detached_head_defaults_to_main_and_named_branch_wins(install, origin):
    _, upstream = origin
    git(upstream, "push", "-q", "origin", "main:stable")
    git(install, "checkout", "-q", "--detach")
    target = git_target(install, None, timeout=10)
    assert (target["current_branch"], target["branch"]) == (None, "main")
    assert git_target(install, "stable", timeout=10)["remote_sha"] == git(upstream, "rev-parse", "HEAD")


def test_missing_remote_branch(install):
    target = git_target(install, "no-such-branch", timeout=10)
    assert (target["remote_sha"], target["up_to_date"]) == (None, False)


def test_not_a_repository_is_git_failed(tmp_path):
    with pytest.raises(GitFailed) as info:
        git_target(tmp_path, None, timeout=10)
    assert info.value.code == "git_failed"
    assert info.value.detail["command"][:3] == ["git", "-C", str(tmp_path)]
    assert "not a git repository" in info.value.detail["stderr"]


def test_no_origin_is_git_failed(tmp_path):
    git(tmp_path, "init", "-q")
    with pytest.raises(GitFailed) as info:
        git_target(tmp_path, None, timeout=10)
    assert "remote" in info.value.detail["command"]


def test_silent_remote_times_out_and_its_process_group_dies(install):
    # upload-pack is what ls-remote runs for a local origin; this one never answers.
    # When it is not killed, its sleep ends and it leaves a file: a git_target that waited for
    # it instead of killing it would return with that file there.
    marker, outlived = "37.4321", install.parent / "upload-pack-outlived-its-timeout"
    git(install, "config", "remote.origin.uploadpack", f"sleep {marker}; touch {shlex.quote(str(outlived))}; :")
    with pytest.raises(GitFailed) as info:
        git_target(install, None, timeout=0.5)
    assert info.value.timed_out and "ls-remote" in info.value.detail["command"]

    def sleepers() -> list[int]:
        return [p.pid for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", marker]]

    deadline = time.monotonic() + 5
    while sleepers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sleepers() == []
    assert not outlived.exists()


# --- the plan ----------------------------------------------------------------------------------


def tree_fingerprint(*roots: Path) -> dict[str, tuple]:
    """Every entry under ``roots``: mtime and content of files, mtime and kind of the rest."""
    seen: dict[str, tuple] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in [*dirnames, *filenames]:
                path = Path(dirpath) / name
                st = path.lstat()
                if path.is_file() and not path.is_symlink():
                    seen[str(path)] = (st.st_mtime_ns, st.st_size, hashlib.sha256(path.read_bytes()).hexdigest())
                else:
                    seen[str(path)] = (st.st_mtime_ns, st.st_mode)
            seen[dirpath] = (Path(dirpath).lstat().st_mtime_ns,)
    return seen


def test_plan_lists_live_gateways_and_changes_nothing(short_dir, gateways, install, origin):
    root = short_dir / "hermes"
    (root / "profiles" / "coder").mkdir(parents=True)
    (root / "profiles" / "idle").mkdir(parents=True)
    first = gateways(root, "default")
    second = gateways(root, "coder")
    _, upstream = origin
    new = commit(upstream, "README", "two\n")
    git(upstream, "push", "-q", "origin", "main")
    # A tracked file rewritten with equal content has a stale index entry: a `git status` that
    # may take optional locks would rewrite .git/index to refresh it.
    time.sleep(0.01)
    (install / "README").write_text((install / "README").read_text())

    before = tree_fingerprint(root, install / ".git")
    plan = make_plan(root, install, probes=Probes(dockerenv=short_dir / "none"), env={})
    after = tree_fingerprint(root, install / ".git")
    assert after == before

    assert plan.install.kind == "git" and not plan.refused
    assert plan.git["remote_sha"] == new and plan.git["up_to_date"] is False
    assert [p["name"] for p in plan.profiles] == ["default", "coder", "idle"]
    live = {g.profile: g for g in plan.gateways}
    assert set(live) == {"default", "coder"}
    for gateway in (first, second):
        record = live[gateway.profile]
        assert record.pid == gateway.pid
        assert record.supervisor == detect_supervisor()  # "container" where the tests run in one
        assert record.source == "socket"
        assert record.code_sha == gateway.wait_running()["code_sha"]
        assert record.code_version
    assert any("fast-forward main" in a and new[:12] in a for a in plan.actions)
    assert any("3 profile(s)" in a for a in plan.actions)
    assert any(a.startswith("restart 2 gateway(s)") for a in plan.actions)

    text = render_plan(plan)
    assert f"pid {first.pid}" in text and f"pid {second.pid}" in text
    assert "nothing was changed" in text


def test_a_sibling_install_gateway_is_named_foreign_and_a_gateways_child_still_sees_its_parent(
    short_dir, gateways, install
):
    ours, sibling = short_dir / "ours", short_dir / "sibling"
    (ours / "profiles" / "coder").mkdir(parents=True)
    (sibling / "profiles" / "coder").mkdir(parents=True)  # same profile name, another home
    mine = gateways(ours, "coder")
    theirs = gateways(sibling, "coder")
    plan = make_plan(ours, install, probes=Probes(dockerenv=short_dir / "none"), env={})
    assert [g.pid for g in plan.gateways] == [mine.pid]
    foreign = [f for f in plan.foreign if f["pid"] == theirs.pid]
    assert foreign and foreign[0]["home"] == str(sibling / "profiles" / "coder")
    assert not any(f["pid"] == mine.pid for f in plan.foreign)
    assert any(a.startswith("leave alone") and str(theirs.pid) in a for a in plan.actions)
    assert "foreign" in render_plan(plan)

    # An update started from inside a gateway (a tool of that gateway) scans from a descendant
    # of it: the scan must not leave out its own ancestors. The parent here is gateway-shaped
    # to the canonical matcher (`hermes gateway run`) and runs on our home.
    entry = short_dir / "bin" / "hermes"
    entry.parent.mkdir()
    entry.write_text(
        f"#!{sys.executable}\n"
        "import json, os, subprocess, sys\n"
        "child = subprocess.run([sys.executable, '-c', 'import json, sys; from pathlib import Path; "
        "from fleet.discovery import scan_gateways; "
        "print(json.dumps([r.pid for r in scan_gateways(Path(sys.argv[1]))]))', os.environ['ROOT']],\n"
        "                       capture_output=True, text=True, timeout=60)\n"
        "print(json.dumps({'me': os.getpid(), 'seen': json.loads(child.stdout or 'null'), 'err': child.stderr}))\n"
    )
    entry.chmod(0o755)
    parent = subprocess.run(
        [str(entry), "gateway", "run", "--profile", "coder"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=python_env(HERMES_HOME=str(ours), ROOT=str(ours)),
    )
    assert parent.returncode == 0, parent.stderr
    report = json.loads(parent.stdout)
    assert report["me"] in report["seen"] and mine.pid in report["seen"], report["err"]


def test_plan_up_to_date_without_gateways(short_dir, install):
    root = short_dir / "hermes"
    root.mkdir()
    plan = make_plan(root, install, probes=Probes(dockerenv=short_dir / "none"), env={})
    assert plan.git["up_to_date"] is True
    assert plan.gateways == []
    assert plan.actions[0].startswith("no code change")
    assert plan.to_dict()["code"]["code_sha"] == git(install, "rev-parse", "HEAD")


def test_plan_for_a_refused_install_names_the_external_command(short_dir, install):
    root = short_dir / "hermes"
    root.mkdir()
    plan = make_plan(root, install, env={"HERMES_INSTALL_KIND": "docker"}, probes=Probes(dockerenv=short_dir / "none"))
    assert plan.refused and plan.git is None
    assert "docker compose pull && docker compose up -d" in plan.actions[0]
    assert plan.to_dict()["refused"] is True
    assert "Refused:" in render_plan(plan)


def test_plan_with_an_unreachable_origin_reports_a_typed_error(short_dir, install):
    root = short_dir / "hermes"
    root.mkdir()
    git(install, "remote", "set-url", "origin", str(short_dir / "gone.git"))
    plan = make_plan(root, install, probes=Probes(dockerenv=short_dir / "none"), env={})
    assert plan.git is None and plan.git_error["code"] == "git_failed"
    assert plan.actions[0].startswith("stop: cannot read the update target")
    assert "target    unknown" in render_plan(plan)


def test_a_no_op_plan_takes_no_snapshot_unless_a_completion_is_owed(short_dir, gateways, install, origin):
    root = short_dir / "hermes"
    root.mkdir()
    gateways(root, "default")  # runs this checkout's code, not the install's: stale, owed a restart
    no_op = make_plan(root, install, probes=Probes(dockerenv=short_dir / "none"), env={})
    assert no_op.git["up_to_date"] is True
    assert any(a.startswith("restart 1 gateway(s)") for a in no_op.actions)
    assert (no_op.snapshot, no_op.to_dict()["snapshot"], no_op.owed_completion) == (False, False, None)
    assert not any("snapshot" in a for a in no_op.actions), no_op.actions

    obligations.arm_completion(root, update_id="u-owed", before=None, after=git(install, "rev-parse", "HEAD"))
    owed = make_plan(root, install, probes=Probes(dockerenv=short_dir / "none"), env={})
    assert (owed.snapshot, owed.owed_completion) == (True, "u-owed")
    assert [a for a in owed.actions if "snapshot" in a or "completion" in a] == [
        "snapshot config, auth and state files of all 1 profile(s) into their state-snapshots/",
        "run the completion owed by update u-owed (dependencies, config migrations)",
    ]
    obligations.completion_path(root).write_text("{ torn")  # unreadable: owed, as the run takes it
    assert make_plan(root, install, probes=Probes(dockerenv=short_dir / "none"), env={}).snapshot is True

    obligations.clear_completion(root)
    _, upstream = origin
    commit(upstream, "README", "two\n")
    git(upstream, "push", "-q", "origin", "main")
    moves = make_plan(root, install, probes=Probes(dockerenv=short_dir / "none"), env={}, backup="none")
    assert moves.snapshot is True
    assert "no snapshot (--no-backup): the receipt records that none was taken" in moves.actions
    assert "owed" not in " ".join(moves.actions)
