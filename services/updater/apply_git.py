"""Apply, the git way: fetch the install's branch and fast-forward the tree to it.

Only this module runs git for the apply stage, through the updater's one git runner
(``services.updater.git``). A git failure is raised as ``GitFailed`` tagged with the stage
of the git command that failed, never of a later step, so the caller can decide on an
archive fallback from what git itself did. The commit point is
the fast-forward: ``on_step("moved", ...)`` fires right after it, before the stash
restore that can still go wrong.

Local changes to tracked files are stashed around the fast-forward. A restore that
conflicts leaves the tree clean on the new commit and the stash entry parked for the
user (``ApplyResult.user_action``); untracked files are never stashed or touched. The
stash commit is announced (``on_step("stashed", ...)``) before it is listed or the tree
cleaned, so the caller can record it as owed first: a run killed anywhere after that leaves
the change in the tree, or in a stash entry the record names by its commit, which the next
update puts back (``restore_owed``). Entries are found by commit, never by position: the
operator's own stashes are never touched.

A tree an archive update installed (``services.updater.apply_archive``) is adopted once git
works again: HEAD moves to the commit the archive was cut from, which changes no file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from services.updater.errors import UpdateError
from services.updater.git import APPLY_TIMEOUT, GitFailed, run
from shared.errors import HermesError
from shared.version import CODE_STAMP, code_stamp, git_dir_of

StepCallback = Callable[[str, dict[str, Any]], None]
StashState = Literal["none", "restored", "parked"]


class NotFastForward(UpdateError):
    """Local commits the target does not contain: refused, nothing changed."""

    code = "not_fast_forward"


class InvalidTarget(UpdateError):
    """The remote or branch to update from is not a name git takes: refused, nothing changed."""

    code = "update_target_invalid"


class WrongBranch(UpdateError):
    """HEAD is neither on the branch being updated nor detached inside its history."""

    code = "wrong_branch"


@dataclass(frozen=True)
class ApplyResult:
    before: str
    after: str
    branch: str
    fetched_sha: str
    moved: bool = False  # the tree moved: the commit point was passed
    up_to_date: bool = False
    stash: StashState = "none"
    stash_ref: str | None = None  # "stash@{N}" while parked
    stash_sha: str | None = None
    user_action: str | None = None
    conflicts: tuple[str, ...] = ()
    via: Literal["git", "archive"] = "git"
    archive: dict[str, Any] | None = None  # what the archive fallback downloaded, replaced and carried

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["conflicts"] = list(self.conflicts)
        return out


def run_git(repo: Path | str, *args: str, stage: str, timeout: float = APPLY_TIMEOUT) -> str:
    """Run ``git -C repo args...`` and return its stdout; any non-zero exit, timeout or
    spawn failure raises ``GitFailed`` carrying ``stage``."""
    return run(repo, args, stage=stage, timeout=timeout).stdout


def is_dirty(repo: Path | str, *, timeout: float = APPLY_TIMEOUT) -> list[str]:
    """Tracked paths with local changes, staged or not; untracked files do not count."""
    out = run_git(repo, "status", "--porcelain", "-uno", "-z", stage="status", timeout=timeout)
    entries = iter(out.split("\0"))
    paths: list[str] = []
    for entry in entries:
        if not entry:
            continue
        paths.append(entry[3:])
        if "R" in entry[:2]:  # -z puts a rename's source path in the next entry
            paths.append(next(entries, ""))
    return [p for p in paths if p]


def apply(
    repo: Path | str,
    branch: str,
    *,
    remote: str = "origin",
    timeout: float = APPLY_TIMEOUT,
    on_step: StepCallback | None = None,
    gate: Callable[[str], None] | None = None,
) -> ApplyResult:
    """Fetch ``remote``'s ``branch`` and fast-forward the tree to it; with ``gate``, only
    once ``gate(target)`` returned: what it raises ends the run before anything moved.

    ``on_step(name, detail)`` is called with "fetched", "stashed" (the stash commit exists, and
    the tree is about to be cleaned: record it now), "moving" (just before the fast-forward:
    what it is about to commit), "moved" (the commit point) and "restored" or "parked" (also
    "restored" when a failed fast-forward put the stash back); it is the caller's receipt hook
    and must not raise.
    ``timeout`` bounds each git command. Refusals (``WrongBranch``, ``NotFastForward``)
    and failures before the commit point leave HEAD and the working tree as they were.
    """
    repo = Path(repo)
    emit: StepCallback = on_step or (lambda name, detail: None)

    def git(*args: str, stage: str) -> str:
        return run_git(repo, *args, stage=stage, timeout=timeout).strip()

    tracking = f"refs/remotes/{remote}/{branch}"
    _check_names(repo, remote, tracking, timeout)
    before = git("rev-parse", "--verify", "HEAD^{commit}", stage="status")
    current = _current_branch(repo, timeout)
    if current is not None and current != branch:
        # Refused before touching the network: checking out another branch is not ours.
        raise WrongBranch(
            f"{repo} is on branch {current!r}, not {branch!r}; switch branches before updating",
            detail={"expected": branch, "current": current, "head": before},
        )

    # An explicit refspec, so the tracking ref moves whatever remote.<name>.fetch says.
    git("fetch", "--prune", remote, f"+refs/heads/{branch}:{tracking}", stage="fetch")
    target = git("rev-parse", "--verify", f"{tracking}^{{commit}}", stage="status")
    emit("fetched", {"remote": remote, "branch": branch, "sha": target})
    adopted = _adopt_archive_stamp(repo, before, timeout)
    if adopted is not None:
        before = adopted
        emit("adopted", {"sha": adopted})

    if before == target:
        return ApplyResult(before=before, after=before, branch=branch, fetched_sha=target, up_to_date=True)
    if not _is_ancestor(repo, before, target, timeout):
        if current is None:
            raise WrongBranch(
                f"{repo} has a detached HEAD at {before[:12]}, outside {remote}/{branch}",
                detail={"expected": branch, "current": None, "head": before},
            )
        ahead, behind = _ahead_behind(repo, before, target, timeout)
        raise NotFastForward(
            f"{branch} has {ahead} local commit(s) not on {remote}/{branch} ({behind} behind); "
            "refusing to update over them",
            detail={"head": before, "target": target, "ahead": ahead, "behind": behind},
        )
    if gate is not None:
        gate(target)

    dirty = is_dirty(repo, timeout=timeout)
    stash_sha = _stash(repo, before, dirty, emit, timeout) if dirty else None
    emit("moving", {"before": before, "after": target, "branch": branch})
    try:
        git("merge", "--ff-only", target, stage="merge")
    except BaseException as exc:
        if isinstance(exc, GitFailed) and exc.detail is not None:
            exc.detail["untracked"] = _untracked_in_the_way(repo, before, target, timeout)
        if stash_sha is not None:
            _restore_after_failed_merge(repo, stash_sha, exc, emit, timeout)
        raise

    # The commit point: the tree moved. Whatever follows is reported, not rolled back.
    emit("moved", {"before": before, "after": target, "branch": branch})
    moved = ApplyResult(before=before, after=target, branch=branch, fetched_sha=target, moved=True)
    if stash_sha is None:
        return moved
    return _restore_after_move(repo, moved, stash_sha, emit, timeout)


def _adopt_archive_stamp(repo: Path, head: str, timeout: float) -> str | None:
    """After an archive update, point HEAD at the commit the archive was cut from, once git has it.

    The index is reset to that commit too, so whatever differs in the tree is a real local
    change and goes through the stash like any other. The stamp is then no longer needed.
    """
    stamp = code_stamp(repo)
    if stamp is None or stamp["over_head"] != head:
        return None
    sha = stamp["code_sha"]
    known = run(repo, ["cat-file", "-e", f"{sha}^{{commit}}"], stage="status", timeout=timeout, ok=(0, 1, 128))
    if known.returncode != 0:
        return None  # not fetched: the stamp keeps speaking for the tree
    run_git(repo, "reset", "--quiet", "--mixed", sha, stage="adopt", timeout=timeout)
    git_dir = git_dir_of(repo)
    if git_dir is not None:
        (git_dir / CODE_STAMP).unlink(missing_ok=True)
    return sha


def _check_names(repo: Path, remote: str, tracking: str, timeout: float) -> None:
    # Both end up in argv: refuse option-looking or malformed names outright.
    valid = run(repo, ["check-ref-format", tracking], stage="status", timeout=timeout, ok=(0, 1))
    if not remote or remote.startswith("-") or valid.returncode != 0:
        raise InvalidTarget(f"not a valid remote/branch: {tracking!r}", detail={"field": "tracking"})


def _current_branch(repo: Path, timeout: float) -> str | None:
    """The checked-out branch, or None for a detached HEAD."""
    proc = run(repo, ["symbolic-ref", "-q", "HEAD"], stage="status", timeout=timeout, ok=(0, 1))
    ref = proc.stdout.strip()
    return ref.removeprefix("refs/heads/") if proc.returncode == 0 else None


def _is_ancestor(repo: Path, ancestor: str, descendant: str, timeout: float) -> bool:
    args = ["merge-base", "--is-ancestor", ancestor, descendant]
    return run(repo, args, stage="status", timeout=timeout, ok=(0, 1)).returncode == 0


def _ahead_behind(repo: Path, head: str, target: str, timeout: float) -> tuple[int, int]:
    out = run_git(repo, "rev-list", "--left-right", "--count", f"{head}...{target}", stage="status", timeout=timeout)
    ahead, behind = out.split()
    return int(ahead), int(behind)


def _stash(repo: Path, before: str, dirty: list[str], emit: StepCallback, timeout: float) -> str | None:
    """Stash tracked changes (what ``git stash push`` does, in its three steps, so that the
    commit is announced before the tree changes); the stash commit, or None if there was
    nothing to stash."""
    label = _label(before)
    sha = run_git(repo, "stash", "create", label, stage="stash", timeout=timeout).strip()
    if not sha:
        return None
    emit("stashed", {"sha": sha, "before": before, "paths": dirty})
    run_git(repo, "stash", "store", "--message", label, sha, stage="stash", timeout=timeout)
    run_git(repo, "reset", "--quiet", "--hard", "--no-recurse-submodules", "HEAD", stage="stash", timeout=timeout)
    return sha


def _label(before: str) -> str:
    return f"hermes-update {before[:12]}"


def _stash_ref(repo: Path, sha: str, timeout: float) -> str | None:
    """``stash@{N}`` of the entry whose commit is ``sha``, if it is still listed. Given to git as
    ``refs/stash@{N}``: beside a branch named ``stash`` the short form names that branch's reflog."""
    listed = run_git(repo, "stash", "list", "--format=%H", stage="stash", timeout=timeout).split()
    return f"stash@{{{listed.index(sha)}}}" if sha in listed else None


def _untracked_in_the_way(repo: Path, before: str, target: str, timeout: float) -> list[str]:
    """Untracked files the fast-forward would have to overwrite (a diagnosis, never raises)."""
    try:
        added = run_git(
            repo,
            "diff",
            "--name-only",
            "--no-renames",
            "--diff-filter=A",
            "-z",
            before,
            target,
            stage="merge",
            timeout=timeout,
        )
        untracked = run_git(repo, "ls-files", "--others", "--exclude-standard", "-z", stage="merge", timeout=timeout)
    except GitFailed:
        return []
    incoming = {p for p in added.split("\0") if p}
    incoming_dirs = {str(parent) for p in incoming for parent in Path(p).parents if str(parent) != "."}
    return sorted(
        p
        for p in untracked.split("\0")
        if p and (p in incoming or p in incoming_dirs or any(str(parent) in incoming for parent in Path(p).parents))
    )


def _restore_after_failed_merge(repo: Path, sha: str, exc: BaseException, emit: StepCallback, timeout: float) -> None:
    """Put the stashed changes back on the unmoved HEAD before ``exc`` propagates."""
    try:
        ref = _stash_ref(repo, sha, timeout)
        if ref is not None:
            run_git(repo, "stash", "pop", "--quiet", f"refs/{ref}", stage="restore", timeout=timeout)
            emit("restored", {"sha": sha})
            return
        failure: dict[str, Any] = {"reason": "stash entry no longer listed"}
    except GitFailed as restore_exc:
        failure = restore_exc.to_dict()
    if isinstance(exc, HermesError):
        if exc.detail is None:
            exc.detail = {}
        exc.detail["stash"] = {"state": "parked", "sha": sha, "restore_failed": failure}


def _restore_after_move(repo: Path, moved: ApplyResult, sha: str, emit: StepCallback, timeout: float) -> ApplyResult:
    back = _pop_or_park(repo, sha, _label(moved.before), timeout)
    if back.state == "restored":
        emit("restored", {"sha": sha})
        return replace(moved, stash="restored", stash_sha=sha)
    emit("parked", {"sha": sha, "ref": back.ref, "conflicts": list(back.conflicts)})
    return replace(
        moved, stash="parked", stash_ref=back.ref, stash_sha=sha, user_action=back.user_action, conflicts=back.conflicts
    )


@dataclass(frozen=True)
class Restore:
    """What became of a stash entry put back onto the tree."""

    state: Literal["restored", "parked"]
    ref: str | None = None  # "stash@{N}" while parked
    conflicts: tuple[str, ...] = ()
    user_action: str | None = None


def restore_owed(repo: Path | str, sha: str, before: str, *, timeout: float = APPLY_TIMEOUT) -> Restore | None:
    """Put back the stash entry ``sha`` that an interrupted update made over ``before``, onto
    whatever tree is checked out now; None when it is no longer listed (restored, or the operator took it).

    Only onto a tree without tracked changes: a conflict is undone by a hard reset, which must
    destroy nothing but the failed restore. With changes of its own the tree is left alone
    and the entry is parked for the operator.
    """
    repo = Path(repo)
    ref = _stash_ref(repo, sha, timeout)
    if ref is None:
        return None
    if is_dirty(repo, timeout=timeout):
        files = _stash_files(repo, sha, timeout)
        action = (
            f"Your local changes to {', '.join(files)} are kept in stash {ref} ({sha}), not re-applied "
            f"because {repo} has changes of its own: once those are committed or stashed, run "
            f"`git stash apply {sha}` in {repo}, then `git stash drop` that entry"
        )
        return Restore("parked", ref, (), action)
    return _pop_or_park(repo, sha, _label(before), timeout)


def _pop_or_park(repo: Path, sha: str, label: str, timeout: float) -> Restore:
    """Pop the entry ``sha`` onto a tree without tracked changes; on a conflict (or any other
    failure of the pop) leave the tree clean and the entry listed, for the operator."""
    ref = _stash_ref(repo, sha, timeout)
    if ref is not None:
        popped = run(repo, ["stash", "pop", "--quiet", f"refs/{ref}"], stage="restore", timeout=timeout, ok=range(256))
        if popped.returncode == 0:
            return Restore("restored")

    # Every index entry HEAD lacks came from the failed pop, and the stash keeps all of it.
    unmerged = run_git(repo, "diff", "--name-only", "--diff-filter=U", "-z", stage="restore", timeout=timeout)
    conflicts = tuple(sorted({p for p in unmerged.split("\0") if p}))
    run_git(repo, "reset", "--quiet", "--hard", "HEAD", stage="restore", timeout=timeout)
    ref = _stash_ref(repo, sha, timeout)
    if ref is None:  # never leave the changes as a dangling commit only
        run_git(repo, "stash", "store", "--message", label, sha, stage="restore", timeout=timeout)
        ref = _stash_ref(repo, sha, timeout) or "stash@{0}"
    then = (
        f"resolve the conflicts in {', '.join(conflicts)}"
        if conflicts
        else f"check {', '.join(_stash_files(repo, sha, timeout)) or 'the files it changes'}"
    )
    action = (
        f"Your local changes are kept in stash {ref} ({sha}): run `git stash apply {sha}` in {repo}, "
        f"{then}, then `git stash drop` that entry"
    )
    return Restore("parked", ref, conflicts, action)


def _stash_files(repo: Path, sha: str, timeout: float) -> tuple[str, ...]:
    """The tracked paths the stash entry ``sha`` changes (its tree against the commit it was made on)."""
    out = run_git(repo, "diff", "--name-only", "-z", f"{sha}^1", sha, stage="restore", timeout=timeout)
    return tuple(sorted({p for p in out.split("\0") if p}))


def rewind(
    repo: Path | str, target: str, *, timeout: float = APPLY_TIMEOUT, on_step: StepCallback | None = None
) -> ApplyResult:
    """A rollback's move: HEAD, and the branch it is on, back to ``target``, a commit the local
    ``.git`` holds (nothing is fetched). ``on_step`` gets "moving" and "moved" as ``apply``
    gives them. Local changes to tracked files the move does not touch are kept; one it would
    overwrite makes git refuse (``git reset --keep``), and nothing changes."""
    repo = Path(repo)
    emit: StepCallback = on_step or (lambda name, detail: None)
    before = run_git(repo, "rev-parse", "--verify", "HEAD^{commit}", stage="status", timeout=timeout).strip()
    branch = _current_branch(repo, timeout) or "HEAD"
    if before == target:
        return ApplyResult(before=before, after=before, branch=branch, fetched_sha=target, up_to_date=True)
    emit("moving", {"before": before, "after": target, "branch": branch})
    run_git(repo, "reset", "--quiet", "--keep", target, stage="rewind", timeout=timeout)
    emit("moved", {"before": before, "after": target, "branch": branch})
    return ApplyResult(before=before, after=target, branch=branch, fetched_sha=target, moved=True)
