"""The install's code commit, read from .git without running git."""

from __future__ import annotations

import pytest

from shared.version import code_sha
from tests.support.installs import git


@pytest.fixture
def repo(tmp_path):
    path = tmp_path / "install"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "--allow-empty", "-m", "one")
    return path


def test_branch_head(repo):
    assert code_sha(repo) == git(repo, "rev-parse", "HEAD")


def test_packed_refs(repo):
    head = git(repo, "rev-parse", "HEAD")
    git(repo, "pack-refs", "--all")
    assert not (repo / ".git" / "refs" / "heads" / "main").exists()
    assert code_sha(repo) == head


def test_detached_head_and_a_new_commit(repo):
    first = git(repo, "rev-parse", "HEAD")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "--allow-empty", "-m", "two")
    second = git(repo, "rev-parse", "HEAD")
    assert code_sha(repo) == second != first
    git(repo, "checkout", "-q", "--detach", first)
    assert code_sha(repo) == first


def test_worktree_with_a_gitdir_file(repo, tmp_path):
    other = tmp_path / "worktree"
    git(repo, "worktree", "add", "-q", "--detach", str(other))
    assert (other / ".git").is_file()
    assert code_sha(other) == git(repo, "rev-parse", "HEAD")
