"""The archive update's swap of the tree, journaled, and its recovery after a crash.

The swap renames each replaced top-level entry out of the tree and the archive's in, all on
one filesystem (the staging area lives in the git directory). The journal in the staging area
says how far it got: a failure rolls the swap back in-process, and a swap cut short by a
crash is rolled back by the next update (whichever way that one applies) before it does
anything else, unless HEAD moved since the crash: then it is left to the operator. A finished
swap is committed by the code stamp (``shared.version``) naming the archive's commit, and the
index is rebuilt from the new tree so that the next update can tell local edits from the
swap's own changes.
"""

from __future__ import annotations

import logging
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from services.updater.errors import UpdateError
from services.updater.git import APPLY_TIMEOUT, GitFailed, run
from shared.files import read_json, write_json_atomic
from shared.version import CODE_STAMP, git_dir_of, head_commit

log = logging.getLogger(__name__)

STAGING = "hermes-update"  # in the git directory: same filesystem, and git never lists it
JOURNAL = "swap.json"


class SwapFailed(UpdateError):
    """A rename of the swap failed; the tree was put back as it was."""

    code = "swap_failed"


class SwapRecoveryNeeded(UpdateError):
    """A swap cut short by a crash cannot be rolled back safely: HEAD moved since. Left as it was."""

    code = "swap_recovery_needed"


def swap_in(repo: Path, work: Path, journal: dict[str, Any]) -> None:
    (work / "old").mkdir()
    write_json_atomic(work / JOURNAL, journal)
    try:
        for name in journal["replaced"]:
            if os.path.lexists(repo / name):
                os.rename(repo / name, work / "old" / name)
            if name in journal["shipped"]:
                os.rename(work / "new" / name, repo / name)
    except OSError as exc:
        roll_back(repo, work, journal)
        raise SwapFailed(f"swapping in the new tree failed ({exc}); the old tree was put back") from None


def roll_back(repo: Path, work: Path, journal: dict[str, Any]) -> None:
    """Undo a swap cut short at any rename: every name is in one of three states."""
    for name in reversed(journal["replaced"]):
        live, new, old = repo / name, work / "new" / name, work / "old" / name
        if name in journal["shipped"] and not os.path.lexists(new) and os.path.lexists(live):
            os.rename(live, new)  # the new entry was moved in
        if os.path.lexists(old):
            os.rename(old, live)  # the old entry was moved out
    journal_path = work / JOURNAL
    journal_path.unlink(missing_ok=True)


def commit(repo: Path, work: Path, journal: dict[str, Any]) -> dict[str, Any]:
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


def stamp_index(repo: Path, stamp: dict[str, Any], timeout: float) -> None:
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
            roll_back(repo, work, journal)
            done.append(f"rolled back the interrupted swap of update {journal.get('work_id')}")
        elif journal and journal.get("state") == "swapped":
            stamp = commit(repo, work, journal)
            try:
                stamp_index(repo, stamp, APPLY_TIMEOUT)
            except GitFailed as exc:
                log.warning("%s: the index could not be rebuilt after the swap: %s", repo, exc.message)
            done.append(f"stamped the completed swap of update {journal.get('work_id')}")
        shutil.rmtree(work, ignore_errors=True)
    for line in done:
        log.warning("%s: %s", repo, line)
    return done
