"""Apply, the archive way: when git itself failed, swap the tree for the release's source archive.

The fallback fires only for a failure of a git command (``should_fall_back``), never for a
later step such as a dependency install: re-downloading the tree cannot fix those and would
clobber it. It refuses a dirty tree, since the swap replaces files wholesale and cannot stash:
tracked changes and untracked files block it, and so does every ignored path the swap would
destroy. An ignored path is admitted when the swap leaves it alone (its top-level entry is not
replaced: ``.venv/``, ``*.egg-info/``), when it is regenerated anyway (a nested
``__pycache__``/``node_modules``), or when it is a live build output the swap carries over by
hardlink (``preserved``: a source archive ships none of them). The check runs twice: before
the download against the tracked top-level entries, and just before the swap (after the
graft) against the set the archive really replaces. An archive cut from an ancestor of the
installed code is refused as a downgrade, when git can tell.

The swap renames each replaced top-level entry out of the tree and the archive's in, all on
one filesystem (the staging area lives in the git directory). It is journaled: a failure
rolls it back in-process, and a swap cut short by a crash is rolled back by the next update
(whichever way it applies) before it does anything else, unless HEAD moved since the crash:
then it is left to the operator. The commit point is the end of the swap. HEAD stays where it
was; a code stamp (``shared.version``) names the archive's commit, and the index is rebuilt
from the new tree so that the next update can tell local edits from the swap's own changes.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from services.updater.apply_git import ApplyResult, StepCallback
from services.updater.archive import ArchiveFailed, archive_url, download, unpack
from services.updater.git import GitFailed, run
from shared.errors import HermesError
from shared.files import read_json, write_json_atomic
from shared.redaction import redact_text
from shared.version import CODE_STAMP, code_stamp, git_dir_of, head_commit

log = logging.getLogger(__name__)

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
REGENERATED = frozenset({"__pycache__", "node_modules"})
STAGING = "hermes-update"  # in the git directory: same filesystem, and git never lists it
JOURNAL = "swap.json"
GIT_TIMEOUT = 120.0


class DirtyTree(HermesError):
    """The tree holds something the swap would destroy: refused, nothing changed."""

    code = "dirty_tree"


class SwapFailed(HermesError):
    """A rename of the swap failed; the tree was put back as it was."""

    code = "swap_failed"


class SwapRecoveryNeeded(HermesError):
    """A swap cut short by a crash cannot be rolled back safely: HEAD moved since. Left as it was."""

    code = "swap_recovery_needed"


class ArchiveIsOlder(HermesError):
    """The archive was cut from an ancestor of the code in the tree: installing it is a downgrade."""

    code = "archive_is_older"


def should_fall_back(exc: BaseException) -> bool:
    """Whether ``exc`` is git itself failing — judged by the command that failed, nothing else."""
    return isinstance(exc, GitFailed) and bool(exc.argv) and Path(exc.argv[0]).name == "git"


# --- is the tree clean enough to swap? --------------------------------------------------------


@dataclass(frozen=True)
class TreeCheck:
    dirty: tuple[str, ...]  # tracked changes and untracked files
    blocking: tuple[str, ...]  # ignored paths the swap would destroy
    admitted: tuple[tuple[str, str], ...]  # ignored paths it may go ahead with, and why

    @property
    def clean(self) -> bool:
        return not self.dirty and not self.blocking

    def to_dict(self) -> dict[str, Any]:
        return {
            "dirty": list(self.dirty),
            "blocking": list(self.blocking),
            "admitted": [{"path": p, "why": why} for p, why in self.admitted],
        }


def check_tree(
    repo: Path, replaced: Iterable[str], preserved: Iterable[str], *, timeout: float = GIT_TIMEOUT
) -> TreeCheck:
    """Classify every change, untracked and ignored path of ``repo`` for a swap of ``replaced``."""
    replaced, preserved = set(replaced), [PurePosixPath(p) for p in preserved]
    stamp = code_stamp(repo)
    if stamp is not None:
        # After an archive swap the index holds the swapped tree, not HEAD's: only edits
        # made since (work tree against index) are local changes, and only if the index
        # itself is still the one the swap wrote.
        tree = run(repo, ["write-tree"], stage="status", timeout=timeout).stdout.strip()
        if tree != stamp.get("tree"):
            return TreeCheck(("(the index changed since the last archive update)",), (), ())
    out = run(
        repo, ["status", "--porcelain=v1", "-z", "-uall", "--ignored=matching"], stage="status", timeout=timeout
    ).stdout
    dirty: list[str] = []
    blocking: list[str] = []
    admitted: list[tuple[str, str]] = []
    entries = iter(out.split("\0"))
    for entry in entries:
        if not entry:
            continue
        code, path = entry[:2], entry[3:]
        if "R" in code or "C" in code:
            next(entries, None)  # -z puts the source path in an entry of its own
        if code == "!!":
            why = _admitted(PurePosixPath(path.rstrip("/")), replaced, preserved)
            if why is None:
                blocking.append(path)
            else:
                admitted.append((path, why))
        elif code == "??" or stamp is None or code[1] != " ":
            dirty.append(path)
    return TreeCheck(tuple(dirty), tuple(blocking), tuple(admitted))


def _admitted(path: PurePosixPath, replaced: set[str], preserved: list[PurePosixPath]) -> str | None:
    if path.parts[0] not in replaced:
        return "outside what the swap replaces"
    if any(path.is_relative_to(p) for p in preserved):
        return "a build output carried into the new tree"
    if REGENERATED.intersection(path.parts[1:]):
        return "regenerated: a nested " + "/".join(sorted(REGENERATED.intersection(path.parts[1:])))
    return None


def tracked_roots(repo: Path, *, timeout: float = GIT_TIMEOUT) -> frozenset[str]:
    """The top-level entries git tracks: the stand-in for the archive's before the download."""
    out = run(repo, ["ls-files", "-z"], stage="status", timeout=timeout).stdout
    return frozenset(p.split("/", 1)[0] for p in out.split("\0") if p)


# --- the fallback -----------------------------------------------------------------------------


def apply_archive(
    repo: Path | str,
    branch: str,
    *,
    url_template: str,
    work_id: str,
    preserved: Iterable[str] = PRESERVED_NESTED,
    on_step: StepCallback | None = None,
    timeout: float = GIT_TIMEOUT,
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
    recover_interrupted_swap(repo)
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
    work = git_dir / STAGING / work_id
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
        _swap(repo, work, journal)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise

    # The commit point: the tree moved. What follows is reported, never rolled back.
    stamp = _commit(repo, work, journal)
    detail = {"before": before, "after": unpacked.commit, "branch": branch, "via": "archive"}
    emit("moved", detail)
    index_error = None
    try:
        _stamp_index(repo, stamp, timeout)
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


# --- the swap, its journal and its recovery ---------------------------------------------------


def _swap(repo: Path, work: Path, journal: dict[str, Any]) -> None:
    (work / "old").mkdir()
    write_json_atomic(work / JOURNAL, journal)
    try:
        for name in journal["replaced"]:
            if os.path.lexists(repo / name):
                os.rename(repo / name, work / "old" / name)
            if name in journal["shipped"]:
                os.rename(work / "new" / name, repo / name)
    except OSError as exc:
        _roll_back(repo, work, journal)
        raise SwapFailed(f"swapping in the new tree failed ({exc}); the old tree was put back") from None


def _roll_back(repo: Path, work: Path, journal: dict[str, Any]) -> None:
    """Undo a swap cut short at any rename: every name is in one of three states."""
    for name in reversed(journal["replaced"]):
        live, new, old = repo / name, work / "new" / name, work / "old" / name
        if name in journal["shipped"] and not os.path.lexists(new) and os.path.lexists(live):
            os.rename(live, new)  # the new entry was moved in
        if os.path.lexists(old):
            os.rename(old, live)  # the old entry was moved out
    journal_path = work / JOURNAL
    journal_path.unlink(missing_ok=True)


def _commit(repo: Path, work: Path, journal: dict[str, Any]) -> dict[str, Any]:
    journal = {**journal, "state": "swapped"}
    write_json_atomic(work / JOURNAL, journal)
    stamp = {
        "code_sha": journal["commit"],
        "over_head": journal["over_head"],
        "source": journal["source"],
        "update_id": journal["work_id"],
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    git_dir = git_dir_of(repo)
    assert git_dir is not None
    write_json_atomic(git_dir / CODE_STAMP, stamp)
    (work / JOURNAL).unlink()
    return stamp


def _stamp_index(repo: Path, stamp: dict[str, Any], timeout: float) -> None:
    """Make the index the swapped tree and record its id, so that local edits stay visible."""
    run(repo, ["add", "-A"], stage="index", timeout=timeout)
    stamp["tree"] = run(repo, ["write-tree"], stage="index", timeout=timeout).stdout.strip()
    git_dir = git_dir_of(repo)
    assert git_dir is not None
    write_json_atomic(git_dir / CODE_STAMP, stamp)


def recover_interrupted_swap(repo: Path) -> list[str]:
    """Finish what a crashed archive update left in the staging area; what was done, for the log.

    A swap cut short is rolled back (nothing was committed); a swap that completed but died
    before its stamp gets the stamp. Staging left by a run that never began a swap is removed.
    A swap cut short over a HEAD that has moved since is not rolled back blindly: someone
    worked on the tree in between, so ``SwapRecoveryNeeded`` leaves it all for the operator.
    """
    git_dir = git_dir_of(repo)
    staging = git_dir / STAGING if git_dir else None
    if staging is None or not staging.is_dir():
        return []
    done = []
    for work in sorted(p for p in staging.iterdir() if p.is_dir()):
        journal = read_json(work / JOURNAL, default=None) if (work / JOURNAL).exists() else None
        if journal and journal.get("state") == "swapping":
            if journal.get("over_head") != head_commit(repo):
                raise SwapRecoveryNeeded(
                    f"an archive update (update {journal.get('work_id')}) was cut short in the middle of its "
                    f"swap over commit {str(journal.get('over_head'))[:12]}, but HEAD has moved since: it was not "
                    f"rolled back. The entries it moved out of {repo} are in {work / 'old'}, the ones it moved in "
                    f"came from {work / 'new'} (the journal is {work / JOURNAL}). Put the entries of old/ back "
                    f"in place of the ones it moved in (or check out a clean tree), remove {work}, then update again",
                    detail={"staging": str(work), "journal": journal, "head": head_commit(repo)},
                )
            _roll_back(repo, work, journal)
            done.append(f"rolled back the interrupted swap of update {journal.get('work_id')}")
        elif journal and journal.get("state") == "swapped":
            stamp = _commit(repo, work, journal)
            try:
                _stamp_index(repo, stamp, GIT_TIMEOUT)
            except GitFailed as exc:
                log.warning("%s: the index could not be rebuilt after the swap: %s", repo, exc.message)
            done.append(f"stamped the completed swap of update {journal.get('work_id')}")
        shutil.rmtree(work, ignore_errors=True)
    for line in done:
        log.warning("%s: %s", repo, line)
    return done
