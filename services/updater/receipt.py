"""The update receipt: what one ``hermes update`` did, as a pure state machine (h11-style).

``Receipt`` holds a JSON dict: ``begin`` makes a ``running`` record, steps/skips/follow-ups
accumulate, ``finish`` makes it terminal once; every misuse raises ``ReceiptError``, and
``from_dict`` takes back only what a writer of this schema could have produced. Nothing here
touches a file: ``receipt_store`` keeps receipts on disk.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from services.updater.errors import UpdateError
from services.updater.update_id import InvalidUpdateId, validate_update_id
from shared import exit_codes
from shared.identity import ProcessIdentity

SCHEMA = 1

RUNNING = "running"
SUCCESS = "success"
PARTIAL = "partial"
FAILED = "failed"
REFUSED = "refused"
INTERRUPTED = "interrupted"
ROLLED_BACK = "rolled_back"  # a gate failed after the commit point: the tree and the moved gateways went back
TERMINAL = frozenset({SUCCESS, PARTIAL, FAILED, REFUSED, INTERRUPTED, ROLLED_BACK})
OUTCOMES = TERMINAL | {RUNNING}


class ReceiptError(UpdateError, ValueError):
    """A receipt used out of order, given a bad value, or read back malformed."""

    code = "receipt_invalid"


# --- exit codes -----------------------------------------------------------------------------


_EXIT_CODES = {
    SUCCESS: exit_codes.OK,
    PARTIAL: exit_codes.FAILED,
    FAILED: exit_codes.FAILED,
    REFUSED: exit_codes.REFUSED,
    INTERRUPTED: exit_codes.INTERRUPTED,
    ROLLED_BACK: exit_codes.FAILED,
}


def exit_code_for(outcome: str, *, committed: bool) -> int:
    """The exit code of ``hermes update`` for a finished run.

    ``committed`` means the tree moved and stayed moved. After that point nothing fails the
    update: a committed run whose tail went wrong is ``success`` with ``followups`` (exit 0).
    The one committed exit 1 is ``partial``: an autostash whose restore conflicted, which only
    the user can re-apply. It is also the outcome of a run that did not move the code itself
    but finished an interrupted one that did, whose stash only the user can re-apply.
    Impossible combinations raise rather than guess.
    """
    if outcome not in TERMINAL:
        raise ReceiptError(f"{outcome!r} is not a terminal outcome (one of {', '.join(sorted(TERMINAL))})")
    if committed and outcome == FAILED:
        raise ReceiptError("after the commit point nothing fails: record success with followups")
    if committed and outcome == REFUSED:
        raise ReceiptError("a refused update committed nothing")
    return _EXIT_CODES[outcome]


# --- the receipt ----------------------------------------------------------------------------


def _update_id(value: object) -> str:
    try:
        return validate_update_id(value)
    except InvalidUpdateId as exc:
        raise ReceiptError(str(exc)) from None


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
            "update_id": _update_id(update_id),
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
        """What only the user can do; a second one is added after the first, never over it."""
        self._open("set the user action")
        text = _text(text, "user action")
        earlier = self._d["user_action"]
        self._d["user_action"] = text if earlier is None else f"{earlier}\n{text}"

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
        _update_id(data["update_id"])
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
