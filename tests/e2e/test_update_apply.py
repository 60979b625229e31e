"""The git apply stage against real repositories: a bare origin, a clone as the install,
and a second clone that pushes upstream commits."""

from __future__ import annotations

import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from services.updater.apply_git import NotFastForward, WrongBranch, apply, is_dirty, restore_owed, run_git
from services.updater.git import GitFailed
from tests.support.installs import git

pytestmark = pytest.mark.usefixtures("isolated_git")


@dataclass
class World:
    origin: Path
    install: Path
    dev: Path

    def push(self, files: dict[str, str], message: str = "upstream change") -> str:
        """Commit ``files`` in the developer clone, push them, return the new sha."""
        for name, text in files.items():
            path = self.dev / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        git(self.dev, "add", "--", *files)
        git(self.dev, "commit", "-q", "-m", message)
        git(self.dev, "push", "-q", "origin", "main")
        return git(self.dev, "rev-parse", "HEAD")

    def head(self) -> str:
        return git(self.install, "rev-parse", "HEAD")

    def stashes(self) -> list[str]:
        return git(self.install, "stash", "list", "--format=%H").split()


def clone(origin: Path, path: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(origin), str(path)], check=True, capture_output=True)
    git(path, "config", "user.name", "Test")
    git(path, "config", "user.email", "test@example.invalid")
    return path


@pytest.fixture
def world(tmp_path: Path) -> World:
    origin = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    dev = clone(origin, tmp_path / "dev")
    w = World(origin=origin, install=tmp_path / "install", dev=dev)
    w.push({"app.py": "print('v1')\n", "notes.txt": "notes\n", "config.txt": "value = 1\n"}, "initial")
    clone(origin, w.install)
    return w


def test_up_to_date_moves_nothing(world: World) -> None:
    head = world.head()
    result = apply(world.install, "main")
    assert result.up_to_date and not result.moved
    assert result.before == result.after == result.fetched_sha == head == world.head()
    assert result.stash == "none"


def test_fast_forward_reaches_origin(world: World) -> None:
    new = world.push({"new.txt": "from upstream\n"})
    steps: list[str] = []
    result = apply(world.install, "main", on_step=lambda name, detail: steps.append(name))
    assert result.moved and not result.up_to_date
    assert result.after == new == world.head()
    assert (world.install / "new.txt").read_text() == "from upstream\n"
    assert steps == ["fetched", "moving", "moved"]
    assert result.to_dict()["after"] == new


def test_local_change_is_stashed_and_restored(world: World) -> None:
    (world.install / "notes.txt").write_text("my notes\n")
    new = world.push({"app.py": "print('v2')\n"})
    steps: list[str] = []
    result = apply(world.install, "main", on_step=lambda name, detail: steps.append(name))
    assert result.moved and result.after == new == world.head()
    assert result.stash == "restored" and result.user_action is None
    assert (world.install / "notes.txt").read_text() == "my notes\n"
    assert (world.install / "app.py").read_text() == "print('v2')\n"
    assert world.stashes() == []
    assert steps == ["fetched", "stashed", "moving", "moved", "restored"]


def test_conflicting_restore_parks_the_stash(world: World) -> None:
    (world.install / "config.txt").write_text("value = local\n")
    new = world.push({"config.txt": "value = upstream\n"})
    steps: list[str] = []
    result = apply(world.install, "main", on_step=lambda name, detail: steps.append(name))

    assert result.moved and result.after == new == world.head()  # committed
    assert result.stash == "parked" and result.conflicts == ("config.txt",)
    assert result.stash_sha in world.stashes()
    assert result.stash_ref == "stash@{0}"
    assert result.user_action is not None and result.stash_sha in result.user_action
    tree_text = (world.install / "config.txt").read_text()
    assert tree_text == "value = upstream\n" and "<<<<<<<" not in tree_text
    assert is_dirty(world.install) == []
    # The parked entry really holds the local edit.
    assert git(world.install, "show", f"{result.stash_sha}:config.txt") == "value = local"
    assert steps == ["fetched", "stashed", "moving", "moved", "parked"]
    assert result.to_dict()["conflicts"] == ["config.txt"]


def test_the_stash_is_announced_before_it_is_listed_or_the_tree_cleaned(world: World) -> None:
    (world.install / "notes.txt").write_text("my notes\n")
    world.push({"app.py": "print('v2')\n"})
    seen: list[tuple[str, list[str], str]] = []

    def on_step(name: str, detail: dict) -> None:
        if name == "stashed":  # what a kill right here leaves: the change still in the tree
            seen.append((detail["sha"], world.stashes(), (world.install / "notes.txt").read_text()))

    head = world.head()
    result = apply(world.install, "main", on_step=on_step)
    [(sha, listed, text)] = seen
    assert listed == [] and text == "my notes\n"
    assert result.stash_sha == sha and git(world.install, "rev-parse", f"{sha}^1") == head


def test_an_owed_stash_is_put_back_by_its_commit_leaving_other_entries(world: World) -> None:
    (world.install / "notes.txt").write_text("my notes\n")
    git(world.install, "stash", "push", "-q", "-m", "owed")
    owed = world.stashes()[0]
    (world.install / "app.py").write_text("print('mine')\n")
    git(world.install, "stash", "push", "-q", "-m", "the operator's")
    mine = world.stashes()[0]
    head = world.head()
    world.push({"config.txt": "value = 2\n"})
    git(world.install, "pull", "-q", "--ff-only")

    back = restore_owed(world.install, owed, head)
    assert back is not None and (back.state, back.user_action) == ("restored", None)
    assert (world.install / "notes.txt").read_text() == "my notes\n"
    assert world.stashes() == [mine]
    assert restore_owed(world.install, owed, head) is None  # no longer listed: nothing owed


def test_an_owed_stash_is_not_put_onto_a_tree_with_changes_of_its_own(world: World) -> None:
    (world.install / "notes.txt").write_text("my notes\n")
    git(world.install, "stash", "push", "-q", "-m", "owed")
    owed = world.stashes()[0]
    (world.install / "notes.txt").write_text("newer notes\n")

    back = restore_owed(world.install, owed, world.head())
    assert back is not None and (back.state, back.ref) == ("parked", "stash@{0}")
    assert back.user_action is not None and f"git stash apply {owed}" in back.user_action
    assert "notes.txt" in back.user_action
    assert (world.install / "notes.txt").read_text() == "newer notes\n"  # left alone
    assert world.stashes() == [owed]


def test_an_owed_stash_that_conflicts_is_parked_on_a_clean_tree(world: World) -> None:
    (world.install / "config.txt").write_text("value = local\n")
    git(world.install, "stash", "push", "-q", "-m", "owed")
    owed = world.stashes()[0]
    head = world.head()
    world.push({"config.txt": "value = upstream\n"})
    git(world.install, "pull", "-q", "--ff-only")

    back = restore_owed(world.install, owed, head)
    assert back is not None and (back.state, back.conflicts) == ("parked", ("config.txt",))
    assert back.user_action is not None and owed in back.user_action and "config.txt" in back.user_action
    assert (world.install / "config.txt").read_text() == "value = upstream\n" and is_dirty(world.install) == []
    assert world.stashes() == [owed]


def test_diverged_local_commit_is_refused(world: World) -> None:
    (world.install / "app.py").write_text("print('local')\n")
    git(world.install, "commit", "-q", "-am", "local work")
    (world.install / "notes.txt").write_text("dirty\n")
    head = world.head()
    world.push({"new.txt": "x\n"})
    with pytest.raises(NotFastForward) as caught:
        apply(world.install, "main")
    assert caught.value.code == "not_fast_forward"
    assert caught.value.detail is not None and caught.value.detail["ahead"] == 1
    assert world.head() == head
    assert (world.install / "notes.txt").read_text() == "dirty\n"
    assert not (world.install / "new.txt").exists()
    assert world.stashes() == []


def test_wrong_branch_is_refused(world: World) -> None:
    git(world.install, "switch", "-q", "-c", "feature")
    (world.install / "notes.txt").write_text("dirty\n")
    head = world.head()
    world.push({"new.txt": "x\n"})
    with pytest.raises(WrongBranch) as caught:
        apply(world.install, "main")
    assert caught.value.code == "wrong_branch"
    assert world.head() == head
    assert git(world.install, "branch", "--show-current") == "feature"
    assert (world.install / "notes.txt").read_text() == "dirty\n"
    assert world.stashes() == []


def test_detached_at_an_ancestor_fast_forwards(world: World) -> None:
    git(world.install, "switch", "-q", "--detach")
    new = world.push({"new.txt": "x\n"})
    result = apply(world.install, "main")
    assert result.moved and world.head() == new


def test_fetch_failure_is_classified_fetch(world: World) -> None:
    (world.install / "notes.txt").write_text("dirty\n")
    head = world.head()
    shutil.rmtree(world.origin)
    with pytest.raises(GitFailed) as caught:
        apply(world.install, "main")
    exc = caught.value
    assert exc.code == "git_failed" and exc.stage == "fetch"
    assert exc.detail is not None and "fetch" in exc.detail["command"] and exc.detail["returncode"] != 0
    assert world.head() == head
    assert (world.install / "notes.txt").read_text() == "dirty\n"
    assert world.stashes() == []


def test_untracked_file_in_the_way_fails_the_merge_and_restores(world: World) -> None:
    world.push({"new.txt": "from upstream\n"})
    (world.install / "new.txt").write_text("mine\n")
    (world.install / "notes.txt").write_text("my notes\n")
    head = world.head()
    with pytest.raises(GitFailed) as caught:
        apply(world.install, "main")
    exc = caught.value
    assert exc.stage == "merge" and exc.detail is not None
    assert exc.detail["untracked"] == ["new.txt"]
    assert "merge" in exc.detail["command"]
    assert world.head() == head
    assert (world.install / "new.txt").read_text() == "mine\n"
    assert (world.install / "notes.txt").read_text() == "my notes\n"
    assert world.stashes() == []


def test_remote_credentials_never_reach_the_error(world: World) -> None:
    git(world.install, "remote", "set-url", "origin", "https://user:s3cret@127.0.0.1:9/x.git")
    with pytest.raises(GitFailed) as caught:
        apply(world.install, "main", timeout=30)
    exc = caught.value
    assert exc.stage == "fetch"
    assert "s3cret" not in str(exc) and "s3cret" not in repr(exc.detail)


def test_credentials_in_argv_and_stderr_are_redacted(world: World) -> None:
    url = "https://user:s3cret@127.0.0.1:9/x.git"
    with pytest.raises(GitFailed) as caught:
        run_git(world.install, "ls-remote", url, stage="fetch", timeout=30)
    exc = caught.value
    assert "s3cret" not in str(exc) and "s3cret" not in repr(exc.detail) and "s3cret" not in repr(exc.to_dict())
    assert exc.detail is not None and "https://[redacted]@127.0.0.1:9/x.git" in exc.detail["command"]


def test_a_hung_remote_times_out(world: World) -> None:
    # Accepts the connection (kernel backlog) and never answers: only the timeout ends git,
    # and with it the git-remote-http helper that holds the output pipes.
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        url = f"http://127.0.0.1:{server.getsockname()[1]}/x.git"
        with pytest.raises(GitFailed) as caught:
            run_git(world.install, "ls-remote", url, stage="fetch", timeout=1)
    assert caught.value.detail is not None
    assert caught.value.detail["returncode"] is None and caught.value.detail["timeout"] == 1
