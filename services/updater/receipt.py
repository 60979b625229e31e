"""The update receipt: what one ``hermes update`` did, on disk from its first moment.

Two halves, h11-style. ``Receipt`` is a pure state machine over a JSON dict: ``begin`` makes a
``running`` record, steps/skips/follow-ups accumulate, ``finish`` makes it terminal once; every
misuse raises ``ReceiptError``. ``ReceiptStore`` is the only I/O: it writes receipts (always
redacted, always atomically) into the ROOT home's ``logs/update_receipts/``, keeps the
``latest.json`` pointer and the newest ``KEEP`` records, and marks records of dead runs
``interrupted``.
"""

from __future__ import annotations

import copy
import json
import os
import re
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shared.files import StateFileCorrupt, locked, read_json, write_json_atomic
from shared.identity import ProcessIdentity, is_alive
from shared.redaction import redact

SCHEMA = 1
KEEP = 20
DIR_MODE = 0o755

RUNNING = "running"
SUCCESS = "success"
PARTIAL = "partial"
FAILED = "failed"
REFUSED = "refused"
INTERRUPTED = "interrupted"
TERMINAL = frozenset({SUCCESS, PARTIAL, FAILED, REFUSED, INTERRUPTED})
OUTCOMES = TERMINAL | {RUNNING}

_UPDATE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_RECEIPT_NAME = re.compile(r"update_\d{8}_\d{6}_\d+_[A-Za-z0-9][A-Za-z0-9_-]{0,63}\.json")


class ReceiptError(ValueError):
    """A receipt used out of order, given a bad value, or read back malformed."""


# --- exit codes -----------------------------------------------------------------------------


_EXIT_CODES = {SUCCESS: 0, PARTIAL: 1, FAILED: 1, REFUSED: 2, INTERRUPTED: 130}


def exit_code_for(outcome: str, *, committed: bool) -> int:
    """The exit code of ``hermes update`` for a finished run.

    ``committed`` means the tree moved and stayed moved. After that point nothing fails the
    update: a committed run whose tail went wrong is ``success`` with ``followups`` (exit 0).
    The one committed exit 1 is ``partial``: an autostash whose restore conflicted, which only
    the user can re-apply. Impossible combinations raise rather than guess.
    """
    if outcome not in TERMINAL:
        raise ReceiptError(f"{outcome!r} is not a terminal outcome (one of {', '.join(sorted(TERMINAL))})")
    if committed and outcome == FAILED:
        raise ReceiptError("after the commit point nothing fails: record success with followups")
    if committed and outcome == REFUSED:
        raise ReceiptError("a refused update committed nothing")
    if not committed and outcome == PARTIAL:
        raise ReceiptError("a partial outcome means the code moved, so it is always committed")
    return _EXIT_CODES[outcome]


# --- the receipt ----------------------------------------------------------------------------


def new_update_id() -> str:
    return secrets.token_hex(6)


def validate_update_id(update_id: object) -> str:
    # The id is part of a file name, so it is held to a file-name-safe alphabet.
    if not isinstance(update_id, str) or not _UPDATE_ID.fullmatch(update_id):
        raise ReceiptError(f"invalid update id {update_id!r}: use 1-64 of A-Z, a-z, 0-9, '_', '-'")
    return update_id


def _iso(at: datetime | None) -> str:
    moment = datetime.now(UTC) if at is None else at
    if moment.tzinfo is None:
        raise ReceiptError("timestamps must be timezone-aware")
    return moment.astimezone(UTC).isoformat(timespec="milliseconds")


def _parse_iso(value: object, what: str) -> datetime:
    if not isinstance(value, str):
        raise ReceiptError(f"{what} must be an ISO timestamp string, got {value!r}")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ReceiptError(f"{what} is not an ISO timestamp: {value!r}") from None
    if moment.tzinfo is None:
        raise ReceiptError(f"{what} has no timezone: {value!r}")
    return moment


def _json(value: Any, what: str) -> Any:
    """A private JSON copy of ``value``: a value that cannot be written fails here, not at write time."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ReceiptError(f"{what} is not JSON-serializable: {exc}") from None


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ReceiptError(f"{what} must be a non-empty string, got {value!r}")
    return value


def _kinds(*kinds: type) -> Callable[[Any, str], None]:
    def check(value: Any, what: str) -> None:
        if not isinstance(value, kinds):
            names = " or ".join("object" if k is dict else "array" for k in kinds)
            raise ReceiptError(f"{what} must be a JSON {names}, got {type(value).__name__}")

    return check


def _check_completion(value: Any, what: str) -> None:
    _kinds(dict)(value, what)
    pid, sha = value.get("pid"), value.get("code_sha")
    if type(pid) is not int or pid <= 0:
        raise ReceiptError(f"{what}.pid must be a positive int, got {pid!r}")
    if sha is not None and not isinstance(sha, str):
        raise ReceiptError(f"{what}.code_sha must be a string or null, got {sha!r}")
    version = value.get("code_version")  # absent from the results of older completions
    if version is not None and not isinstance(version, str):
        raise ReceiptError(f"{what}.code_version must be a string or null, got {version!r}")


# What ``set`` accepts; every one of these is null until set.
_SETTABLE: dict[str, Callable[[Any, str], None]] = {
    "plan": _kinds(dict),
    "snapshots": _kinds(list, dict),
    "backup": _kinds(dict),
    "apply": _kinds(dict),
    "restart": _kinds(list, dict),
    "fleet": _kinds(list, dict),
    "before": _kinds(dict),
    "after": _kinds(dict),
    "completion": _check_completion,
}
_FIELDS = frozenset(
    {
        "schema",
        "update_id",
        "started_at",
        "finished_at",
        "argv",
        "pid",
        "start_time",
        "outcome",
        "steps",
        "skips",
        "followups",
        "user_action",
        "exit_code",
        *_SETTABLE,
    }
)


class Receipt:
    """One update's record. Mutators raise ReceiptError once the receipt is finished."""

    def __init__(self, data: dict[str, Any]) -> None:
        # Use begin() or from_dict(); this trusts ``data`` to be valid already.
        self._d = data

    @classmethod
    def begin(
        cls,
        update_id: str,
        argv: Sequence[str],
        identity: ProcessIdentity,
        before: Mapping[str, Any],
        *,
        at: datetime | None = None,
    ) -> Receipt:
        if isinstance(argv, str) or not all(isinstance(a, str) for a in argv):
            raise ReceiptError("argv must be a list of strings")
        if not isinstance(identity, ProcessIdentity):
            raise ReceiptError(f"identity must be a ProcessIdentity, got {type(identity).__name__}")
        if not isinstance(before, Mapping):
            raise ReceiptError(f"before must be a mapping, got {type(before).__name__}")
        data: dict[str, Any] = {
            "schema": SCHEMA,
            "update_id": validate_update_id(update_id),
            "started_at": _iso(at),
            "finished_at": None,
            "argv": list(argv),
            "pid": identity.pid,
            "start_time": identity.start_time,
            "outcome": RUNNING,
            "steps": [],
            "skips": [],
            "followups": [],
            "user_action": None,
            "exit_code": None,
            **dict.fromkeys(_SETTABLE),
        }
        data["before"] = _json(dict(before), "before")
        return cls(data)

    # --- reading --------------------------------------------------------------------------

    @property
    def update_id(self) -> str:
        return self._d["update_id"]

    @property
    def outcome(self) -> str:
        return self._d["outcome"]

    @property
    def exit_code(self) -> int | None:
        return self._d["exit_code"]

    @property
    def finished(self) -> bool:
        return self._d["outcome"] != RUNNING

    @property
    def started_at(self) -> datetime:
        return datetime.fromisoformat(self._d["started_at"])

    @property
    def identity(self) -> ProcessIdentity:
        return ProcessIdentity(self._d["pid"], self._d["start_time"])

    def __getitem__(self, key: str) -> Any:
        return copy.deepcopy(self._d[key])

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self._d)

    def __repr__(self) -> str:
        return f"Receipt({self.update_id!r}, outcome={self.outcome!r})"

    # --- transitions ----------------------------------------------------------------------

    def _open(self, action: str) -> None:
        if self.finished:
            raise ReceiptError(f"cannot {action}: update {self.update_id} already finished {self.outcome}")

    def step(self, name: str, ok: bool, detail: Any = None, *, at: datetime | None = None) -> None:
        self._open("add a step")
        if type(ok) is not bool:
            raise ReceiptError(f"step ok must be a bool, got {ok!r}")
        entry = {"name": _text(name, "step name"), "ok": ok, "detail": _json(detail, "step detail"), "at": _iso(at)}
        self._d["steps"].append(entry)

    def skip(self, name: str, reason: str, *, at: datetime | None = None) -> None:
        # A skip without a reason is the silent gap the receipt exists to prevent.
        self._open("add a skip")
        entry = {"name": _text(name, "skip name"), "reason": _text(reason, "skip reason"), "at": _iso(at)}
        self._d["skips"].append(entry)

    def set(self, key: str, value: Any) -> None:
        self._open(f"set {key}")
        check = _SETTABLE.get(key)
        if check is None:
            raise ReceiptError(f"unknown receipt field {key!r}; settable: {', '.join(_SETTABLE)}")
        value = _json(value, key)
        check(value, key)
        self._d[key] = value

    def followup(self, step: str, reason: str) -> None:
        """Owe ``step``; one entry per step, the latest reason winning (the debt is the same)."""
        self._open("add a follow-up")
        entry = {"step": _text(step, "follow-up step"), "reason": _text(reason, "follow-up reason")}
        owed = self._d["followups"]
        for i, existing in enumerate(owed):
            if existing["step"] == step:
                owed[i] = entry
                return
        owed.append(entry)

    def user_action(self, text: str) -> None:
        self._open("set the user action")
        self._d["user_action"] = _text(text, "user action")

    def finish(self, outcome: str, exit_code: int, *, at: datetime | None = None) -> None:
        self._open(f"finish {outcome}")
        _check_terminal(outcome, exit_code, self._d["user_action"])
        self._d.update(outcome=outcome, exit_code=exit_code, finished_at=_iso(at))

    def interrupt(self, *, by: str | None = None, at: datetime | None = None) -> None:
        """Finish a ``running`` record whose process is gone, saying who found it and when."""
        self._open("mark interrupted")
        at = datetime.now(UTC) if at is None else at
        finder = f"update {by}" if by else "a later update"
        gone = f"pid {self._d['pid']} (start time {self._d['start_time']}) is gone"
        self.step("interrupted", False, f"found interrupted by {finder} at {_iso(at)}: {gone}", at=at)
        self.finish(INTERRUPTED, _EXIT_CODES[INTERRUPTED], at=at)

    # --- parsing --------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, d: object) -> Receipt:
        """A receipt read back; anything a writer of this schema could not have produced raises."""
        if not isinstance(d, Mapping):
            raise ReceiptError(f"a receipt must be a JSON object, got {type(d).__name__}")
        schema = d.get("schema")
        if type(schema) is not int or schema != SCHEMA:
            raise ReceiptError(f"unsupported receipt schema {schema!r} (expected {SCHEMA})")
        missing = sorted(_FIELDS - d.keys())
        unknown = sorted(str(k) for k in d.keys() - _FIELDS)
        if missing or unknown:
            raise ReceiptError(f"receipt fields wrong: missing {missing}, unknown {unknown}")
        data = _json(dict(d), "receipt")
        validate_update_id(data["update_id"])
        _parse_iso(data["started_at"], "started_at")
        argv = data["argv"]
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise ReceiptError("argv must be a list of strings")
        try:
            ProcessIdentity.from_dict(data)
        except ValueError as exc:
            raise ReceiptError(str(exc)) from None
        outcome = data["outcome"]
        if outcome not in OUTCOMES:
            raise ReceiptError(f"unknown outcome {outcome!r}")
        if outcome == RUNNING:
            if data["finished_at"] is not None or data["exit_code"] is not None:
                raise ReceiptError("a running receipt has no finished_at or exit_code")
        else:
            _parse_iso(data["finished_at"], "finished_at")
            _check_terminal(outcome, data["exit_code"], data["user_action"])
        _check_entries(data["steps"], "steps", {"name": _text, "ok": _bool, "detail": _any, "at": _parse_iso})
        _check_entries(data["skips"], "skips", {"name": _text, "reason": _text, "at": _parse_iso})
        _check_entries(data["followups"], "followups", {"step": _text, "reason": _text})
        steps_owed = [f["step"] for f in data["followups"]]
        if len(steps_owed) != len(set(steps_owed)):
            raise ReceiptError("followups name a step twice")
        if data["user_action"] is not None:
            _text(data["user_action"], "user_action")
        for key, check in _SETTABLE.items():
            if data[key] is not None:
                check(data[key], key)
        if data["before"] is None:
            raise ReceiptError("before must be a JSON object, got null")
        return cls(data)


def _check_terminal(outcome: str, exit_code: object, user_action: object) -> None:
    if outcome not in TERMINAL:
        raise ReceiptError(f"{outcome!r} is not a terminal outcome (one of {', '.join(sorted(TERMINAL))})")
    if type(exit_code) is not int or exit_code != _EXIT_CODES[outcome]:
        raise ReceiptError(f"outcome {outcome} exits {_EXIT_CODES[outcome]}, not {exit_code!r}")
    if outcome == PARTIAL and user_action is None:
        # Nothing retries what only the user can re-apply, so the receipt must tell them.
        raise ReceiptError("a partial outcome needs a user_action")


def _bool(value: object, what: str) -> None:
    if type(value) is not bool:
        raise ReceiptError(f"{what} must be a bool, got {value!r}")


def _any(value: object, what: str) -> None:
    pass


def _check_entries(entries: object, what: str, fields: Mapping[str, Callable[[Any, str], object]]) -> None:
    if not isinstance(entries, list):
        raise ReceiptError(f"{what} must be a list")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or entry.keys() != fields.keys():
            raise ReceiptError(f"{what}[{i}] must be an object with exactly {', '.join(fields)}")
        for key, check in fields.items():
            check(entry[key], f"{what}[{i}].{key}")


# --- the store ------------------------------------------------------------------------------


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
        stems = tuple(name.removesuffix(".json") + "." for name in doomed)
        for entry in os.scandir(self.directory):
            # A receipt goes with its siblings (the completion's request and result files).
            if entry.name in doomed or entry.name.startswith(stems):
                try:
                    os.unlink(entry.path)
                except FileNotFoundError:
                    pass

    # --- reading --------------------------------------------------------------------------

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
