"""Where the receipts of one install live: the ROOT home's ``logs/update_receipts/``.

``ReceiptStore`` is the receipts' only I/O. It writes each receipt (always redacted, always
atomically) under a name that sorts by start time, keeps the ``latest.json`` pointer and the
newest ``KEEP`` records, and marks the records of runs whose process is gone ``interrupted``.
What a pruned receipt ended as is added to a tally (``pruned.json``) first, so the count of
each outcome (``outcome_counts``) only ever grows: a counter a metrics scraper can trust.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from services.updater.receipt import RUNNING, Receipt, ReceiptError
from services.updater.update_id import PATTERN as UPDATE_ID
from shared.files import StateFileCorrupt, locked, read_json, write_json_atomic
from shared.identity import is_alive
from shared.redaction import redact

KEEP = 20
TALLY = "pruned.json"  # {"through": the newest receipt name counted, "outcomes": {outcome: n}}
DIR_MODE = 0o755
UNREADABLE = "unreadable"  # the outcome a pruned receipt that could not be read is counted as
_RECEIPT_NAME = re.compile(rf"update_\d{{8}}_\d{{6}}_\d+_{UPDATE_ID}\.json")


@dataclass(frozen=True)
class ReceiptProblem:
    path: Path
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"path": str(self.path), "reason": self.reason}


class ReceiptStore:
    """The receipts of one install, in ``<root>/logs/update_receipts/``.

    Writers serialize on ``latest.json.lock`` so the pointer and pruning of two processes (the
    holder of the update lock and a refused second run) never interleave; readers need no lock
    because every file is replaced atomically.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.directory = self.root / "logs" / "update_receipts"
        self.latest_path = self.directory / "latest.json"

    def path_for(self, receipt: Receipt) -> Path:
        stamp = receipt.started_at.astimezone(UTC).strftime("%Y%m%d_%H%M%S")
        return self.directory / f"update_{stamp}_{receipt.identity.pid}_{receipt.update_id}.json"

    # --- writing --------------------------------------------------------------------------

    def write(self, receipt: Receipt) -> Path:
        """Write ``receipt`` (redacted), point ``latest.json`` at it, prune; returns its path."""
        self._ensure_dirs()
        with self._writing():
            path = self._put(receipt)
            self._point_at(path.name, receipt)
            self._prune(keep_also=path.name)
        return path

    def mark_interrupted(self, *, by: str | None = None, at: datetime | None = None) -> list[Receipt]:
        """Finish as ``interrupted`` every ``running`` record whose process is gone; returns them."""
        if not self.directory.is_dir():
            return []
        changed: list[Receipt] = []
        with self._writing():
            pointer = self._pointer_name()
            for path, receipt in self._scan()[0]:
                if receipt.outcome != RUNNING or is_alive(receipt.identity):
                    continue
                receipt.interrupt(by=by, at=at)
                self._put(receipt, path)
                if path.name == pointer:
                    self._point_at(path.name, receipt)
                changed.append(receipt)
        return changed

    def _ensure_dirs(self) -> None:
        for directory in (self.root / "logs", self.directory):
            try:
                os.mkdir(directory, DIR_MODE)
            except FileExistsError:
                continue
            os.chmod(directory, DIR_MODE)  # only what we made: the umask may have narrowed it

    @contextmanager
    def _writing(self) -> Iterator[None]:
        with locked(self.latest_path):
            yield

    def _put(self, receipt: Receipt, path: Path | None = None) -> Path:
        path = self.path_for(receipt) if path is None else path
        write_json_atomic(path, redact(receipt.to_dict()))
        return path

    def _point_at(self, name: str, receipt: Receipt) -> None:
        pointer = {"path": name, "update_id": receipt.update_id, "outcome": receipt.outcome}
        write_json_atomic(self.latest_path, redact(pointer))

    def _pointer_name(self) -> str | None:
        try:
            return self._read_pointer()
        except (StateFileCorrupt, ReceiptError):
            return None  # a broken pointer is repaired by the next write, not by mark_interrupted

    def _prune(self, *, keep_also: str) -> None:
        # ``keep_also`` is the pointer's target: never deleted, even when it is not among the newest.
        doomed = [name for name in self._receipt_names()[:-KEEP] if name != keep_also]
        if not doomed:
            return
        self._count_pruned(doomed)
        stems = tuple(name.removesuffix(".json") + "." for name in doomed)
        for entry in os.scandir(self.directory):
            # A receipt goes with its siblings (the completion's request and result files).
            if entry.name in doomed or entry.name.startswith(stems):
                try:
                    os.unlink(entry.path)
                except FileNotFoundError:
                    pass

    def _count_pruned(self, doomed: list[str]) -> None:
        """Add the outcomes of ``doomed`` to the tally before they go. Names sort by start time,
        and the tally says the newest it counted: a prune killed before its deletions counts
        nothing twice when it is done again."""
        through, outcomes = self._tally()
        fresh = [name for name in doomed if name > through]
        if not fresh:
            return
        for name in fresh:
            try:
                outcome = self._load(self.directory / name).outcome
            except (OSError, StateFileCorrupt, ReceiptError):
                outcome = UNREADABLE
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        write_json_atomic(self.directory / TALLY, {"through": max(fresh), "outcomes": outcomes})

    def _tally(self) -> tuple[str, dict[str, int]]:
        try:
            data = read_json(self.directory / TALLY, default={})
        except StateFileCorrupt:
            data = {}  # counted afresh from here: the kept receipts still count
        through, outcomes = data.get("through", ""), data.get("outcomes", {})
        if not isinstance(through, str) or not isinstance(outcomes, dict):
            return "", {}
        return through, {k: v for k, v in outcomes.items() if isinstance(k, str) and type(v) is int and v >= 0}

    # --- reading --------------------------------------------------------------------------

    def outcome_counts(self) -> tuple[dict[str, int], list[ReceiptProblem]]:
        """How many updates ended as each outcome (``running`` ones not yet), pruned ones
        included, and every kept receipt that could not be read."""
        _, counts = self._tally()
        receipts, problems = self.all()
        for receipt in receipts:
            if receipt.outcome != RUNNING:
                counts[receipt.outcome] = counts.get(receipt.outcome, 0) + 1
        return counts, problems

    def _receipt_names(self) -> list[str]:
        try:
            return sorted(e.name for e in os.scandir(self.directory) if _RECEIPT_NAME.fullmatch(e.name))
        except FileNotFoundError:
            return []

    def _read_pointer(self) -> str | None:
        pointer = read_json(self.latest_path, default=None)
        if pointer is None:
            return None
        name = pointer.get("path")
        if not isinstance(name, str) or not _RECEIPT_NAME.fullmatch(name):
            raise StateFileCorrupt(self.latest_path, f"path is not a receipt file name: {name!r}")
        return name

    def _load(self, path: Path) -> Receipt:
        try:
            return Receipt.from_dict(read_json(path))
        except ReceiptError as exc:
            raise ReceiptError(f"{path}: {exc}") from None

    def latest(self) -> Receipt | None:
        """The receipt ``latest.json`` names; None only when there is no receipt at all.

        A broken pointer, a missing target or a malformed target raises. Without a pointer
        (a run killed between its first receipt and its first pointer) the newest file is it.
        """
        name = self._read_pointer()
        if name is None:
            names = self._receipt_names()
            return self._load(self.directory / names[-1]) if names else None
        path = self.directory / name
        if not path.exists():
            raise StateFileCorrupt(self.latest_path, f"points at {name}, which does not exist")
        return self._load(path)

    def all(self) -> tuple[list[Receipt], list[ReceiptProblem]]:
        """Every readable receipt, newest first, and every receipt file that could not be read."""
        found, problems = self._scan()
        return [receipt for _, receipt in found], problems

    def _scan(self) -> tuple[list[tuple[Path, Receipt]], list[ReceiptProblem]]:
        found: list[tuple[Path, Receipt]] = []
        problems: list[ReceiptProblem] = []
        for name in reversed(self._receipt_names()):
            path = self.directory / name
            try:
                found.append((path, Receipt.from_dict(read_json(path))))
            except FileNotFoundError:
                continue  # pruned by another writer since the listing
            except StateFileCorrupt as exc:
                problems.append(ReceiptProblem(path, exc.reason))
            except ReceiptError as exc:
                problems.append(ReceiptProblem(path, str(exc)))
        return found, problems
