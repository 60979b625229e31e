"""Apply, the archive way: when git itself failed, swap the tree for the release's source archive.

The fallback fires only for a failure of a git command (``should_fall_back``), never for a
later step such as a dependency install: re-downloading the tree cannot fix those and would
clobber it. It refuses a dirty tree (``tree_check``), twice: before the download against the
tracked top-level entries, and just before the swap against the set the archive really
replaces, once the live build outputs a source archive never ships (``preserved``) are grafted
into the staged tree by hardlink. An archive cut from an ancestor of the installed code is
refused as a downgrade, when git can tell.

The swap itself, its journal and its recovery after a crash are ``swap``'s. The commit point
is the end of the swap; HEAD stays where it was, and the code stamp names the archive's commit.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from services.updater import swap
from services.updater.apply_git import ApplyResult, StepCallback
from services.updater.archive import ArchiveFailed, archive_url, download, unpack
from services.updater.errors import UpdateError
from services.updater.git import APPLY_TIMEOUT, GitFailed, run
from services.updater.tree_check import TreeCheck, check_tree, tracked_roots
from shared.redaction import redact_text
from shared.version import code_stamp, git_dir_of, head_commit

# Live build outputs a source archive never ships, carried into the new tree by hardlink.
PRESERVED_NESTED: tuple[str, ...] = (
    "apps/desktop/release",
    "apps/desktop/dist",
    "apps/desktop/node_modules",
    "apps/desktop/build",
    "hermes_cli/web_dist",
    "ui-tui/dist",
    "ui-tui/node_modules",
    "ui-tui/packages/hermes-ink/dist",
    "web/node_modules",
    "web/dist",
    "scripts/whatsapp-bridge/node_modules",
)


class DirtyTree(UpdateError):
    """The tree holds something the swap would destroy: refused, nothing changed."""

    code = "dirty_tree"


class ArchiveIsOlder(UpdateError):
    """The archive was cut from an ancestor of the code in the tree: installing it is a downgrade."""

    code = "archive_is_older"


def should_fall_back(exc: BaseException) -> bool:
    """Whether ``exc`` is git itself failing — judged by the command that failed, nothing else."""
    return isinstance(exc, GitFailed) and bool(exc.argv) and Path(exc.argv[0]).name == "git"


# --- the fallback -----------------------------------------------------------------------------


def apply_archive(
    repo: Path | str,
    branch: str,
    *,
    url_template: str,
    work_id: str,
    preserved: Iterable[str] = PRESERVED_NESTED,
    on_step: StepCallback | None = None,
    timeout: float = APPLY_TIMEOUT,
    should_stop: Callable[[], bool] | None = None,
) -> ApplyResult:
    """Install ``branch``'s source archive over ``repo``. Before the commit point every
    failure leaves the tree as it was; ``on_step("moving", ...)`` comes just before the swap,
    ``on_step("moved", ...)`` marks the commit point. ``should_stop`` can cut the download
    short (``DownloadStopped``)."""
    repo = Path(repo)
    emit: StepCallback = on_step or (lambda name, detail: None)
    preserved = tuple(preserved)
    git_dir = git_dir_of(repo)
    if git_dir is None:
        raise ArchiveFailed(f"{repo} is not a git checkout")
    swap.recover_interrupted_swap(repo)
    head = head_commit(repo)
    stamp = code_stamp(repo)
    before = stamp["code_sha"] if stamp else head
    try:
        tracked = tracked_roots(repo, timeout=timeout)
        check = check_tree(repo, tracked, preserved, timeout=timeout)
    except GitFailed as exc:
        raise DirtyTree(
            f"cannot tell whether {repo} is clean ({exc.message}): refusing to swap it", detail={"git": exc.to_dict()}
        ) from None
    _refuse_unless_clean(repo, check)

    url = archive_url(url_template, branch)
    work = git_dir / swap.STAGING / work_id
    work.mkdir(parents=True)
    try:
        size = download(url, work / "archive", should_stop=should_stop)
        emit("downloaded", {"url": redact_text(url), "bytes": size})
        unpacked = unpack(work / "archive", work / "new")
        if unpacked.commit == before:
            shutil.rmtree(work, ignore_errors=True)
            return ApplyResult(
                before=before or "",
                after=unpacked.commit,
                branch=branch,
                fetched_sha=unpacked.commit,
                up_to_date=True,
                via="archive",
            )
        ancestry = _refuse_if_older(repo, unpacked.commit, before, timeout)
        replaced = unpacked.roots | tracked
        carried = _graft(repo, unpacked.tree, preserved, replaced)
        # Again, against the real set, and after the graft: hardlinking large build outputs
        # takes a while, and whatever appears meanwhile would go with the old tree.
        check = check_tree(repo, replaced, preserved, timeout=timeout)
        _refuse_unless_clean(repo, check)
        journal = {
            "state": "swapping",
            "replaced": sorted(replaced),
            "shipped": sorted(p.name for p in unpacked.tree.iterdir()),  # a graft may add one
            "commit": unpacked.commit,
            "over_head": head,
            "source": redact_text(url),
            "work_id": work_id,
        }
        emit("moving", {"before": before, "after": unpacked.commit, "branch": branch, "via": "archive"})
        swap.swap_in(repo, work, journal)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise

    # The commit point: the tree moved. What follows is reported, never rolled back.
    stamp = swap.commit(repo, work, journal)
    detail = {"before": before, "after": unpacked.commit, "branch": branch, "via": "archive"}
    emit("moved", detail)
    index_error = None
    try:
        swap.stamp_index(repo, stamp, timeout)
    except GitFailed as exc:
        index_error = exc.message
    shutil.rmtree(work, ignore_errors=True)
    return ApplyResult(
        before=before or "",
        after=unpacked.commit,
        branch=branch,
        fetched_sha=unpacked.commit,
        moved=True,
        via="archive",
        archive={
            "url": redact_text(url),
            "bytes": size,
            "files": len(unpacked.files),
            "replaced": sorted(replaced),
            "carried": carried,
            "admitted": check.to_dict()["admitted"],
            "ancestry": ancestry,
            "index_error": index_error,
        },
    )


def _refuse_unless_clean(repo: Path, check: TreeCheck) -> None:
    if check.clean:
        return
    listed = [*check.dirty, *check.blocking]
    more = f" and {len(listed) - 5} more" if len(listed) > 5 else ""
    raise DirtyTree(
        f"{repo} has local changes the archive swap would destroy ({', '.join(listed[:5])}{more}): "
        "commit, stash or remove them, or repair git so the update can fast-forward",
        detail=check.to_dict(),
    )


def _refuse_if_older(repo: Path, commit: str, current: str | None, timeout: float) -> str:
    """How ``commit`` relates to the code in the tree: ``newer``, ``diverged`` or ``unknown``
    (git cannot tell: it is broken here, or the commit was never fetched); an older one is refused."""
    if current is None:
        return "unknown"
    try:
        known = (
            run(
                repo,
                ["cat-file", "-e", f"{commit}^{{commit}}"],
                stage="ancestry",
                timeout=timeout,
                ok=(0, 1, 128),
                read_only=True,
            ).returncode
            == 0
        )
        if not known:
            return "unknown"
        older = _is_ancestor(repo, commit, current, timeout)
        newer = _is_ancestor(repo, current, commit, timeout)
    except GitFailed:
        return "unknown"
    if older:
        raise ArchiveIsOlder(
            f"the archive was cut from {commit[:12]}, an ancestor of the installed {current[:12]}: "
            "refusing to downgrade; check the archive URL, or repair git so the update can fast-forward",
            detail={"archive_commit": commit, "installed": current},
        )
    return "newer" if newer else "diverged"


def _is_ancestor(repo: Path, ancestor: str, of: str, timeout: float) -> bool:
    """Strictly: a commit is not its own ancestor here."""
    if ancestor == of:
        return False
    done = run(
        repo,
        ["merge-base", "--is-ancestor", ancestor, of],
        stage="ancestry",
        timeout=timeout,
        ok=(0, 1),
        read_only=True,
    )
    return done.returncode == 0


def _graft(repo: Path, tree: Path, preserved: tuple[str, ...], replaced: frozenset[str]) -> list[str]:
    """Hardlink every live preserved build output into the staged tree; the ones carried."""
    carried = []
    for rel in preserved:
        live, staged = repo / rel, tree / rel
        if rel.split("/", 1)[0] not in replaced or not os.path.lexists(live) or os.path.lexists(staged):
            continue  # the swap leaves it alone, there is none, or the archive ships its own
        staged.parent.mkdir(parents=True, exist_ok=True)
        _link_tree(live, staged)
        carried.append(rel)
    return carried


def _link_tree(src: Path, dst: Path) -> None:
    if src.is_symlink():
        os.symlink(os.readlink(src), dst)
    elif src.is_dir():
        dst.mkdir()
        shutil.copystat(src, dst)
        for entry in os.scandir(src):
            _link_tree(Path(entry.path), dst / entry.name)
    else:
        try:
            os.link(src, dst)
        except OSError:  # a filesystem without hard links: a copy keeps the output all the same
            shutil.copy2(src, dst)
