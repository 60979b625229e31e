"""Is the tree clean enough for the archive swap? Every change, untracked and ignored path of
the checkout, classified against what the swap would replace.

The swap replaces top-level entries wholesale and cannot stash, so tracked changes and
untracked files block it, and so does every ignored path the swap would destroy. An ignored
path is admitted when the swap leaves it alone (its top-level entry is not replaced:
``.venv/``, ``*.egg-info/``), when it is regenerated anyway (a nested ``__pycache__`` or
``node_modules``), or when it is a live build output the swap carries over (``preserved``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from services.updater.git import APPLY_TIMEOUT, run
from shared.version import code_stamp

REGENERATED = frozenset({"__pycache__", "node_modules"})


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
    repo: Path, replaced: Iterable[str], preserved: Iterable[str], *, timeout: float = APPLY_TIMEOUT
) -> TreeCheck:
    """Classify every change, untracked and ignored path of ``repo`` for a swap of ``replaced``."""
    swapped, kept = set(replaced), [PurePosixPath(p) for p in preserved]
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
            why = _admitted(PurePosixPath(path.rstrip("/")), swapped, kept)
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


def tracked_roots(repo: Path, *, timeout: float = APPLY_TIMEOUT) -> frozenset[str]:
    """The top-level entries git tracks: the stand-in for the archive's before the download."""
    out = run(repo, ["ls-files", "-z"], stage="status", timeout=timeout).stdout
    return frozenset(p.split("/", 1)[0] for p in out.split("\0") if p)
