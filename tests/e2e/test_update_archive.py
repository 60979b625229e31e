"""The archive fallback of the apply stage: real repositories, a real HTTP server, real archives."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from services.updater import apply_archive as apply_archive_mod
from services.updater import swap as swap_mod
from services.updater.apply_archive import ArchiveIsOlder, DirtyTree, apply_archive, should_fall_back
from services.updater.apply_git import apply
from services.updater.archive import (
    ArchiveFailed,
    DownloadStopped,
    DownloadTimedOut,
    archive_url,
    download,
    unpack,
)
from services.updater.git import GitFailed
from services.updater.receipt import Receipt
from services.updater.receipt_store import ReceiptStore
from services.updater.swap import JOURNAL, SwapFailed, SwapRecoveryNeeded, recover_interrupted_swap
from services.updater.tree_check import check_tree, tracked_roots
from shared.errors import HermesError
from shared.identity import current_identity
from shared.version import CODE_STAMP, code_sha, head_commit
from tests.support.archive_origin import ArchiveOrigin, Fault
from tests.support.archive_updates import crash_mid_swap, manifest
from tests.support.installs import git

PRESERVED = ("web/node_modules", "web/dist")

pytestmark = pytest.mark.usefixtures("isolated_git")


class World:
    def __init__(self, base: Path):
        self.origin, self.install, self.dev = base / "origin.git", base / "install", base / "dev"
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(self.origin)], check=True)
        for path in (self.dev, self.install):
            subprocess.run(["git", "clone", "-q", str(self.origin), str(path)], check=True, capture_output=True)
            git(path, "config", "user.name", "Test")
            git(path, "config", "user.email", "test@example.invalid")
            git(path, "checkout", "-q", "-B", "main")
        self.push(
            {
                ".gitignore": "node_modules/\n__pycache__/\n*.egg-info/\ndist/\n*.log\n",
                "src/app.py": "one\n",
                "web/index.html": "<p>one</p>\n",
                "docs/old.md": "to be deleted upstream\n",
            }
        )
        git(self.install, "pull", "-q", "origin", "main")
        git(self.install, "branch", "-q", "--set-upstream-to=origin/main")
        self.server = ArchiveOrigin(self.origin)

    def push(self, files: dict[str, str | None], message: str = "release") -> str:
        for name, text in files.items():
            path = self.dev / name
            if text is None:
                git(self.dev, "rm", "-q", name)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            git(self.dev, "add", name)
        git(self.dev, "commit", "-q", "-m", message)
        git(self.dev, "push", "-q", "origin", "main")
        return git(self.dev, "rev-parse", "HEAD")

    def break_git(self) -> None:
        git(self.install, "remote", "set-url", "origin", str(self.origin.parent / "gone.git"))

    def repair_git(self) -> None:
        git(self.install, "remote", "set-url", "origin", str(self.origin))

    def build_outputs(self) -> None:
        for rel in (
            "web/node_modules/lib/index.js",
            "web/dist/app.js",
            "src/__pycache__/app.pyc",
            "hermes.egg-info/PKG-INFO",
        ):
            path = self.install / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(rel)

    def fall_back(self, suffix: str = ".zip", **kw) -> object:
        return apply_archive(
            self.install, "main", url_template=self.server.url(suffix), work_id="u1", preserved=PRESERVED, **kw
        )


@pytest.fixture
def world(tmp_path):
    built = World(tmp_path)
    yield built
    built.server.close()


# --- which failures fall back ------------------------------------------------------------------


def test_only_a_failing_git_command_falls_back(world):
    world.break_git()
    with pytest.raises(GitFailed) as caught:
        apply(world.install, "main")
    assert caught.value.stage == "fetch" and should_fall_back(caught.value)
    assert not should_fall_back(GitFailed("deps", ["pip", "install", "."], 1, "no"))  # classified by argv
    assert not should_fall_back(subprocess.CalledProcessError(1, ["pip"]))
    assert not should_fall_back(HermesError("a dependency install failed"))


# --- archives ----------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".zip", ".tar.gz"])
def test_a_forge_archive_unpacks_with_its_commit_modes_and_links(world, tmp_path, suffix):
    (world.dev / "bin").mkdir()
    (world.dev / "bin/run").write_text("#!/bin/sh\n")
    (world.dev / "bin/run").chmod(0o755)
    os.symlink("../src/app.py", world.dev / "bin/app")
    git(world.dev, "add", "bin")
    sha = world.push({"src/app.py": "two\n"})
    download(archive_url(world.server.url(suffix), "main"), tmp_path / "a")
    unpacked = unpack(tmp_path / "a", tmp_path / "tree")
    assert unpacked.commit == sha
    assert unpacked.roots == {".gitignore", "bin", "src", "web", "docs"}
    assert (tmp_path / "tree/src/app.py").read_text() == "two\n"
    assert os.access(tmp_path / "tree/bin/run", os.X_OK) and not os.access(tmp_path / "tree/src/app.py", os.X_OK)
    assert os.readlink(tmp_path / "tree/bin/app") == "../src/app.py"


# --- downloads ---------------------------------------------------------------------------------


def test_429_and_5xx_are_retried_honouring_retry_after(world, tmp_path):
    world.server.faults.extend([Fault(429, {"Retry-After": "7"}), Fault(502), Fault(drop=True)])
    slept: list[float] = []
    size = download(archive_url(world.server.url(), "main"), tmp_path / "a", sleep=slept.append, attempts=4)
    assert size > 0 and len(world.server.requests) == 4
    assert slept[0] == 7 and len(slept) == 3


def test_retries_are_bounded_and_a_404_is_not_retried(world, tmp_path):
    world.server.faults.extend([Fault(503)] * 5)
    with pytest.raises(ArchiveFailed, match="3 attempt"):
        download(archive_url(world.server.url(), "main"), tmp_path / "a", sleep=lambda s: None)
    assert len(world.server.requests) == 3
    world.server.faults.clear()
    with pytest.raises(ArchiveFailed, match="404"):
        download(archive_url(world.server.url(), "no-such-branch"), tmp_path / "b", sleep=lambda s: None)
    assert len(world.server.requests) == 4


def test_only_http_urls_and_credentials_never_show(world, tmp_path, monkeypatch):
    with pytest.raises(ArchiveFailed):
        archive_url("file:///etc/{branch}", "main")
    assert archive_url("https://x.invalid/a/{branch}.zip", "feature/x").endswith("/feature%2Fx.zip")
    with pytest.raises(ArchiveFailed) as caught:
        download("http://user:s3cret@127.0.0.1:9/a.zip?token=t0ken", tmp_path / "a", sleep=lambda s: None, attempts=1)
    assert "s3cret" not in str(caught.value.to_dict()) and "t0ken" not in str(caught.value.to_dict())

    # A signed URL's secret is in its query: never in the journal, the stamp or the receipt.
    secrets = ("pa55word", "s1gnature", "t0ken")
    template = world.server.url().replace("://", "://user:pa55word@") + "?sig=s1gnature&token=t0ken"
    journals: list[str] = []
    real_commit = swap_mod.commit
    monkeypatch.setattr(
        swap_mod,
        "commit",
        lambda repo, work, journal: (journals.append((work / JOURNAL).read_text()), real_commit(repo, work, journal))[
            1
        ],
    )
    world.break_git()
    world.push({"src/app.py": "two\n"})
    result = apply_archive(world.install, "main", url_template=template, work_id="u1", preserved=PRESERVED)
    assert result.moved and len(journals) == 1 and "?sig=[redacted]&token=[redacted]" in journals[0]
    stamp = (world.install / ".git" / CODE_STAMP).read_text()
    receipt = Receipt.begin("u1", ["hermes", "update"], current_identity(), {"code_sha": None})
    receipt.set("apply", result.to_dict())
    world.server.faults.append(Fault(404))
    with pytest.raises(ArchiveFailed) as failed:
        download(archive_url(template, "main"), tmp_path / "b")
    receipt.step("apply", False, failed.value.to_dict())
    written = ReceiptStore(tmp_path).write(receipt).read_text()
    for text in (journals[0], stamp, written):
        assert not [secret for secret in secrets if secret in text]
    assert "/main.zip?sig=[redacted]" in stamp  # the path stays: it says where the code came from


def run_bounded(fn, *, guard: float = 30.0) -> BaseException | None:
    """Run ``fn`` in a thread; what it raised. The guard only makes a hang a failure, not a timing."""
    raised: list[BaseException] = []

    def target() -> None:
        try:
            fn()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(guard)
    assert not thread.is_alive(), f"still running after {guard:g}s"
    return raised[0] if raised else None


def test_a_server_dripping_bytes_cannot_stretch_the_download_past_its_deadline(world, tmp_path):
    world.server.faults.append(Fault(drip=0.1))  # each byte resets a read timeout: it never fires
    raised = run_bounded(lambda: download(archive_url(world.server.url(), "main"), tmp_path / "a", deadline=1.0))
    assert isinstance(raised, DownloadTimedOut) and raised.code == "download_timed_out"
    assert len(world.server.requests) == 1  # a deadline spent is not retried


def test_a_stop_request_cuts_the_download_short_and_leaves_the_tree(world):
    world.break_git()
    world.push({"src/app.py": "two\n"})
    before = manifest(world.install)
    world.server.faults.append(Fault(drip=0.1))
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    raised = run_bounded(lambda: world.fall_back(should_stop=stop.is_set))
    assert isinstance(raised, DownloadStopped) and isinstance(raised, ArchiveFailed)
    assert manifest(world.install) == before
    assert not (world.install / ".git/hermes-update/u1").exists()


# --- the swap ----------------------------------------------------------------------------------


def test_the_archive_replaces_the_tree_and_carries_build_outputs(world):
    world.build_outputs()
    head = head_commit(world.install)
    carried_inode = (world.install / "web/node_modules/lib/index.js").stat().st_ino
    world.break_git()
    new = world.push({"src/app.py": "two\n", "src/extra.py": "new\n", "docs/old.md": None})
    steps: list[str] = []
    result = world.fall_back(on_step=lambda name, detail: steps.append(name))
    assert result.moved and result.via == "archive" and result.after == new
    assert steps == ["downloaded", "moving", "moved"]
    assert (world.install / "src/app.py").read_text() == "two\n" and (world.install / "src/extra.py").exists()
    assert not (world.install / "docs").exists()  # a tracked entry the release dropped is gone
    # Build outputs are carried by hard link; what the swap does not replace is left alone.
    assert (world.install / "web/node_modules/lib/index.js").stat().st_ino == carried_inode
    assert (world.install / "web/dist/app.js").exists()
    assert (world.install / "hermes.egg-info/PKG-INFO").exists()
    assert set(result.archive["carried"]) == set(PRESERVED)
    # HEAD did not move; the stamp speaks for the tree, and the staging area is gone.
    assert head_commit(world.install) == head and code_sha(world.install) == new
    assert not (world.install / ".git/hermes-update/u1").exists()
    # The index is the swapped tree: no local change is seen, an edit is.
    assert check_tree(world.install, tracked_roots(world.install), PRESERVED).clean
    (world.install / "src/app.py").write_text("local edit\n")
    assert "src/app.py" in check_tree(world.install, tracked_roots(world.install), PRESERVED).dirty


@pytest.mark.parametrize(
    "mess",
    [
        lambda i: (i / "src/app.py").write_text("edited\n"),  # a tracked change
        lambda i: (i / "src/notes.txt").write_text("mine\n"),  # an untracked file
        lambda i: (i / "src/run.log").write_text("ignored, in a replaced dir\n"),  # would be destroyed
    ],
)
def test_a_dirty_tree_is_refused_before_anything_is_downloaded(world, mess):
    world.break_git()
    world.push({"src/app.py": "two\n"})
    mess(world.install)
    before = manifest(world.install)
    with pytest.raises(DirtyTree) as caught:
        world.fall_back()
    assert world.server.requests == []
    assert manifest(world.install) == before
    assert caught.value.detail["dirty"] or caught.value.detail["blocking"]


def test_the_tree_is_checked_again_just_before_the_swap(world):
    world.break_git()
    world.push({"src/app.py": "two\n"})
    world.server.before_answer = lambda: (world.install / "src/late.txt").write_text("appeared mid-update\n")
    with pytest.raises(DirtyTree, match="late.txt"):
        world.fall_back()
    assert (world.install / "src/app.py").read_text() == "one\n"
    assert code_sha(world.install) == head_commit(world.install)


def test_what_appears_while_build_outputs_are_grafted_blocks_the_swap(world, monkeypatch):
    world.build_outputs()
    world.break_git()
    world.push({"src/app.py": "two\n"})
    before = manifest(world.install)
    real_link = apply_archive_mod._link_tree

    def slow_graft(src: Path, dst: Path) -> None:
        (world.install / "src/late.txt").write_text("written while the graft ran\n")
        real_link(src, dst)

    monkeypatch.setattr(apply_archive_mod, "_link_tree", slow_graft)
    with pytest.raises(DirtyTree, match="late.txt"):
        world.fall_back()
    (world.install / "src/late.txt").unlink()
    assert manifest(world.install) == before
    assert code_sha(world.install) == head_commit(world.install)
    assert not (world.install / ".git/hermes-update/u1").exists()


def test_an_ignored_path_under_an_entry_only_the_archive_ships_blocks_the_second_check(world):
    world.break_git()
    world.push({"tools/new.py": "shipped from now on\n"})
    (world.install / "tools").mkdir()
    (world.install / "tools/run.log").write_text("ignored (*.log), and the swap would replace tools/\n")
    before = manifest(world.install)
    # Before the download the tracked entries stand in for the archive's: tools/ is not one.
    first = check_tree(world.install, tracked_roots(world.install), PRESERVED)
    assert first.clean and ("tools/run.log", "outside what the swap replaces") in first.admitted
    with pytest.raises(DirtyTree, match="tools/run.log") as caught:
        world.fall_back()
    assert caught.value.detail["blocking"] == ["tools/run.log"]
    assert len(world.server.requests) == 1  # it got past the first check
    assert manifest(world.install) == before
    assert code_sha(world.install) == head_commit(world.install)


def test_a_failed_rename_puts_the_old_tree_back(world, monkeypatch):
    world.build_outputs()
    world.break_git()
    world.push({"src/app.py": "two\n"})
    before = manifest(world.install)
    real_rename, calls = os.rename, []

    def flaky(src, dst):
        calls.append(src)
        if len(calls) == 4:
            raise OSError(28, "No space left on device")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", flaky)
    with pytest.raises(SwapFailed):
        world.fall_back()
    monkeypatch.setattr(os, "rename", real_rename)
    assert manifest(world.install) == before
    assert code_sha(world.install) == head_commit(world.install)


@pytest.mark.parametrize("renames_done", [1, 3, 6])  # of the 7 renames
def test_a_swap_cut_short_by_a_crash_is_rolled_back_by_the_next_update(world, renames_done):
    world.build_outputs()
    world.break_git()
    world.push({"src/app.py": "two\n", "docs/old.md": None})
    before = manifest(world.install)
    crash_mid_swap(world.install, world.server.url(), renames_done)
    assert manifest(world.install) != before  # it really was cut in the middle
    assert recover_interrupted_swap(world.install) == ["rolled back the interrupted swap of update u1"]
    assert manifest(world.install) == before
    assert not (world.install / ".git/hermes-update/u1").exists()


def test_a_cut_short_swap_is_not_rolled_back_over_a_head_that_moved_since(world):
    world.build_outputs()
    world.break_git()
    world.push({"src/app.py": "two\n", "docs/old.md": None})
    crash_mid_swap(world.install, world.server.url(), 3)
    git(world.install, "commit", "-q", "--allow-empty", "-m", "someone worked here after the crash")
    after_crash = manifest(world.install)
    staging = world.install / ".git/hermes-update/u1"
    with pytest.raises(SwapRecoveryNeeded) as caught:
        recover_interrupted_swap(world.install)
    assert caught.value.code == "swap_recovery_needed" and str(staging) in caught.value.message
    assert manifest(world.install) == after_crash and (staging / JOURNAL).exists()
    with pytest.raises(SwapRecoveryNeeded):  # nor by the archive path
        world.fall_back()
    assert manifest(world.install) == after_crash and (staging / JOURNAL).exists()


def test_an_archive_older_than_the_installed_code_is_refused(world):
    old = head_commit(world.install)
    new = world.push({"src/app.py": "two\n"})
    git(world.install, "pull", "-q", "--ff-only")
    assert head_commit(world.install) == new
    git(world.dev, "push", "-q", "--force", "origin", f"{old}:refs/heads/main")  # a stale release
    world.break_git()
    before = manifest(world.install)
    with pytest.raises(ArchiveIsOlder, match="downgrade") as caught:
        world.fall_back()
    assert caught.value.detail == {"archive_commit": old, "installed": new}
    assert manifest(world.install) == before and code_sha(world.install) == new
    assert not (world.install / ".git/hermes-update/u1").exists()


def test_an_archive_git_cannot_place_is_installed_and_says_so(world):
    world.break_git()
    world.push({"src/app.py": "two\n"})  # never fetched: the install does not know the commit
    assert world.fall_back().archive["ancestry"] == "unknown"
    git(world.install, "fetch", "-q", str(world.origin), "main")  # now it does: a descendant
    world.push({"src/app.py": "three\n"})
    git(world.install, "fetch", "-q", str(world.origin), "main")
    assert world.fall_back().archive["ancestry"] == "newer"


def test_an_up_to_date_archive_changes_nothing(world):
    world.break_git()
    before = manifest(world.install)
    result = world.fall_back()
    assert result.up_to_date and not result.moved
    assert manifest(world.install) == before


def test_archive_updates_chain_and_git_adopts_the_tree_once_it_works(world):
    world.break_git()
    first = world.push({"src/app.py": "two\n"})
    world.fall_back()
    second = world.push({"src/app.py": "three\n", "src/more.py": "x\n"})
    result = world.fall_back()  # the stamped tree counts as clean
    assert result.moved and code_sha(world.install) == second != first

    world.repair_git()
    third = world.push({"src/app.py": "four\n"})
    steps: list[str] = []
    done = apply(world.install, "main", on_step=lambda name, detail: steps.append(name))
    assert "adopted" in steps and "stashed" not in steps  # nothing local was mistaken for a change
    assert done.before == second and done.after == third and done.moved
    assert head_commit(world.install) == third == code_sha(world.install)
    assert not (world.install / ".git" / CODE_STAMP).exists()
    assert git(world.install, "status", "--porcelain") == ""


def test_a_stamp_is_ignored_once_head_moves(world):
    world.break_git()
    world.push({"src/app.py": "two\n"})
    world.fall_back()
    stamp = (world.install / ".git" / CODE_STAMP).read_text()
    git(world.install, "commit", "-q", "--allow-empty", "-m", "moved by hand")
    assert code_sha(world.install) == head_commit(world.install)
    assert (world.install / ".git" / CODE_STAMP).read_text() == stamp
