"""The simulator's worktrees with the real git: add, refused branches and bases, diff of
committed, uncommitted and untracked changes, truncation, what removal would lose, remove."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import trio

from simulators.operator_sim import worktrees
from simulators.operator_sim.worktrees import (
    BranchExists,
    GitTimeout,
    InvalidBranch,
    InvalidDiffLimit,
    NotARepository,
    UnknownBase,
    add_worktree,
    diff,
    project_id,
    remove_worktree,
    repo_root,
    unconfirmed,
)
from tests.support.git_repos import commit, git, make_repo


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


async def test_a_worktree_is_added_on_a_new_branch_at_the_head(repo, tmp_path):
    head = git(repo, "rev-parse", "HEAD")
    into = tmp_path / "wt"
    made = await add_worktree(repo, "feature/one", None, into)
    assert made == into
    assert (into / "readme.txt").read_text() == "hello\n"
    assert git(into, "rev-parse", "--abbrev-ref", "HEAD") == "feature/one"
    assert git(into, "rev-parse", "HEAD") == head
    (into / "sub dir").mkdir()
    assert await repo_root(into / "sub dir") == into.resolve()
    assert str(into) in git(repo, "worktree", "list")


async def test_a_worktree_starts_at_the_base_it_is_given(repo, tmp_path):
    first = git(repo, "rev-parse", "HEAD")
    commit(repo, "later.txt", "later\n", "second")
    into = await add_worktree(repo, "from-first", first, tmp_path / "wt")
    assert git(into, "rev-parse", "HEAD") == first
    assert not (into / "later.txt").exists()


def test_the_project_id_is_of_the_real_path(repo, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(repo)
    pid = project_id(repo)
    assert pid.startswith("p-") and len(pid) == 14
    assert int(pid[2:], 16) >= 0
    assert project_id(link) == pid
    assert project_id(tmp_path) != pid


async def test_an_existing_branch_is_branch_exists(repo, tmp_path):
    await add_worktree(repo, "twice", None, tmp_path / "one")
    with pytest.raises(BranchExists) as caught:
        await add_worktree(repo, "twice", None, tmp_path / "two")
    assert caught.value.code == "branch_exists"
    with pytest.raises(BranchExists):
        await add_worktree(repo, "main", None, tmp_path / "three")
    assert not (tmp_path / "two").exists() and not (tmp_path / "three").exists()


@pytest.mark.parametrize("branch", ["bad..name", "-x", "--force", "HEAD", "a b", "x.lock", "", "end/", "a\0b", "@{-1}"])
async def test_a_branch_git_refuses_is_invalid_branch(repo, tmp_path, branch):
    with pytest.raises(InvalidBranch) as caught:
        await add_worktree(repo, branch, None, tmp_path / "wt")
    assert caught.value.code == "invalid_branch"
    assert not (tmp_path / "wt").exists()
    assert git(repo, "branch", "--list") == "* main"


@pytest.mark.parametrize("base", ["no-such-ref", "-b", "0" * 40, ""])
async def test_a_base_that_names_no_commit_is_unknown_base(repo, tmp_path, base):
    with pytest.raises(UnknownBase) as caught:
        await add_worktree(repo, "x", base, tmp_path / "wt")
    assert caught.value.code == "unknown_base"
    assert not (tmp_path / "wt").exists()


async def test_the_diff_has_committed_uncommitted_and_untracked_changes(repo, tmp_path):
    fork = git(repo, "rev-parse", "HEAD")
    into = await add_worktree(repo, "work", None, tmp_path / "wt")
    commit(into, "committed.txt", "committed line\n", "work")
    (into / "readme.txt").write_text("hello\nuncommitted line\n")
    (into / "untracked.txt").write_text("untracked line\n")
    commit(repo, "main-only.txt", "main moved on\n", "main moves")  # not part of the worktree's diff

    result = await diff(into, None, 1_000_000)
    assert result["base"] == fork
    assert result["truncated"] is False
    assert sorted(result["files"]) == ["committed.txt", "readme.txt", "untracked.txt"]
    for line in ("+committed line", "+uncommitted line", "+untracked line"):
        assert line in result["diff"]
    assert "main moved on" not in result["diff"]
    assert "\x1b[" not in result["diff"]
    # The worktree's own index is untouched: the untracked file is still untracked.
    assert "?? untracked.txt" in git(into, "status", "--porcelain")

    against_head = await diff(into, "HEAD", 1_000_000)
    assert sorted(against_head["files"]) == ["readme.txt", "untracked.txt"]


async def test_the_diff_ignores_the_owner_git_config(repo, tmp_path, monkeypatch):
    into = await add_worktree(repo, "work", None, tmp_path / "wt")
    (into / "readme.txt").write_text("changed\n")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[color]\n\tui = always\n[diff]\n\tnoprefix = true\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    result = await diff(into, None, 100_000)
    assert "--- a/readme.txt" in result["diff"]
    assert "\x1b[" not in result["diff"]


async def test_a_long_diff_is_truncated_at_a_character_boundary(repo, tmp_path):
    into = await add_worktree(repo, "big", None, tmp_path / "wt")
    (into / "big.txt").write_text("é" * 50_000 + "\n")
    whole = await diff(into, None, 1_000_000)
    assert whole["truncated"] is False
    for limit in (301, 302):
        cut = await diff(into, None, limit)
        assert cut["truncated"] is True
        assert len(cut["diff"].encode()) <= limit
        assert limit - len(cut["diff"].encode()) <= 1  # only a split "é" is left out
        assert whole["diff"].startswith(cut["diff"])
        assert "\ufffd" not in cut["diff"]
        assert cut["files"] == ["big.txt"]


@pytest.mark.parametrize("limit", [0, -1, 16 * 1024 * 1024 + 1, True, 1.5])
async def test_a_bad_diff_limit_is_a_typed_error(repo, tmp_path, limit):
    into = await add_worktree(repo, "w", None, tmp_path / "wt")
    with pytest.raises(InvalidDiffLimit) as caught:
        await diff(into, None, limit)
    assert caught.value.detail == {"field": "max_bytes"}


async def test_unconfirmed_names_what_removal_would_lose(repo, tmp_path):
    into = await add_worktree(repo, "work", None, tmp_path / "wt")
    assert await unconfirmed(into) == []
    (into / "new.txt").write_text("new\n")
    assert await unconfirmed(into) == ["uncommitted_changes"]
    git(into, "add", "new.txt")
    git(into, "commit", "-q", "-m", "work")
    assert await unconfirmed(into) == ["unmerged_commits"]
    (into / "readme.txt").write_text("edited\n")
    assert await unconfirmed(into) == ["uncommitted_changes", "unmerged_commits"]
    git(into, "checkout", "-q", "--", "readme.txt")
    git(repo, "merge", "-q", "--ff-only", "work")  # the base branch now has the work
    assert await unconfirmed(into) == []


async def test_remove_takes_the_worktree_away_even_with_changes(repo, tmp_path):
    into = await add_worktree(repo, "work", None, tmp_path / "wt")
    (into / "dirty.txt").write_text("dirty\n")
    await remove_worktree(repo, into)
    assert not into.exists()
    assert str(into) not in git(repo, "worktree", "list")


async def test_remove_of_a_worktree_whose_directory_is_gone_prunes_it(repo, tmp_path):
    into = await add_worktree(repo, "work", None, tmp_path / "wt")
    subprocess.run(["rm", "-rf", str(into)], check=True)
    await remove_worktree(repo, into)
    assert str(into) not in git(repo, "worktree", "list")


async def test_a_directory_outside_git_is_not_a_repository(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    for call in (
        repo_root(plain),
        repo_root(tmp_path / "missing"),
        add_worktree(plain, "x", None, tmp_path / "wt"),
        diff(plain, None, 1000),
        unconfirmed(plain),
        remove_worktree(plain, tmp_path / "wt"),
    ):
        with pytest.raises(NotARepository) as caught:
            await call
        assert caught.value.code == "not_a_repository"


async def test_a_diff_that_hangs_is_git_timeout_and_its_processes_are_killed(repo, tmp_path, monkeypatch):
    into = await add_worktree(repo, "slow", None, tmp_path / "wt")
    pid_file = tmp_path / "filter.pid"
    # The repository's own config is honoured: a clean filter that never finishes holds git diff.
    git(repo, "config", "filter.slow.clean", f"echo $$ > {pid_file}; exec sleep 60")
    (into / ".gitattributes").write_text("*.txt filter=slow\n")
    (into / "readme.txt").write_text("changed\n")
    monkeypatch.setattr(worktrees, "DIFF_TIMEOUT", 1.0)
    with pytest.raises(GitTimeout) as caught:
        await diff(into, None, 1000)
    assert caught.value.code == "git_timeout"
    pid = int(pid_file.read_text())
    with trio.fail_after(10):
        while _alive(pid):
            await trio.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
