"""The contract between the old updater and the completion it starts in the new tree: the
request it writes, the result it takes back.

A FROZEN COMPATIBILITY SURFACE: an updater of an older release writes the request and then
runs ``python -m services.updater.completion REQUEST`` from the NEW tree, so every newer
release must keep reading every request schema listed here, and keep the entry module's name.
The other way round, the completion's result is read by the updater of an OLDER release: a
newer completion must keep writing results of the shape ``check_result`` accepts.
``tests/compat/`` pins examples of each.

Request schemas:

- 1: update_id, nonce, root, install_root, before, after, result_path, live_profiles, options.
- 2: schema 1, plus ``plan`` (the updater's pre-swap plan, or null) and ``dependency_spec``:
  the ``dependency_digest`` of the install as it was before the swap (null: it had no
  pyproject.toml). Left out when the updater could not know it (a completion owed by an
  older release); the completion then compares commits instead, as it does for schema 1.

While it runs, a completion keeps its progress beside its result (``progress_path``): the step
it is in, since when, within what bound, and when it last said so. An updater that finds no
progress (a completion of an older release) waits on the whole completion's bound instead.
A step past its bound by ``STEP_SLACK`` ends the completion, whichever side sees it first.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from services.updater.errors import UpdateError
from services.updater.obligations import UNKNOWN_SPEC  # not a digest: nobody knows the spec before the swap
from services.updater.verify import MalformedRow, MatrixRow
from shared.errors import HermesError
from shared.files import read_json, write_json_atomic

REQUEST_SCHEMA = 2
SUPPORTED_REQUEST_SCHEMAS = frozenset({1, 2})
RESULT_SCHEMA = 1
PROGRESS_SCHEMA = 1
# How far past its bound a step may run before the completion is killed (by the updater, or by
# its own heartbeat where no updater is left): its own stop comes first, and what that stop cuts
# short needs a moment to end.
STEP_SLACK = 30.0
ENTRY_MODULE = "services.updater.completion"

DEPENDENCY_SPEC = "pyproject.toml"
_DIGEST = re.compile(r"[0-9a-f]{64}")


class BadRequest(UpdateError):
    code = "completion_request_invalid"


class BadResult(UpdateError):
    """A result correlated with its request, but not of a shape the updater can take."""

    code = "completion_result_invalid"


def dependency_digest(install_root: Path) -> str | None:
    """The sha256 (hex) of the install's dependency spec as it is on disk now; None when there
    is no spec. Both sides of the contract compute it, so it is part of the frozen surface.
    An unreadable spec raises OSError."""
    try:
        return hashlib.sha256((Path(install_root) / DEPENDENCY_SPEC).read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class Request:
    update_id: str
    nonce: str
    root: str
    install_root: str
    before: str | None
    after: str | None
    result_path: str
    live_profiles: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, Any] | None = None
    # The default is UNKNOWN_SPEC, never None: None claims "there was no spec", which would
    # make every completion of a tree that has one re-install its dependencies.
    dependency_spec: str | None = UNKNOWN_SPEC
    schema: int = REQUEST_SCHEMA

    @staticmethod
    def new(**fields: Any) -> Request:
        return Request(nonce=secrets.token_hex(16), **fields)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.dependency_spec == UNKNOWN_SPEC:
            del data["dependency_spec"]
        return data

    def write(self, path: Path) -> None:
        write_json_atomic(path, self.to_dict(), secret=True)  # the nonce is a capability

    @staticmethod
    def read(path: Path) -> Request:
        data = read_json(path)
        schema = data.get("schema")
        if schema not in SUPPORTED_REQUEST_SCHEMAS:
            raise BadRequest(f"request schema {schema!r} is not one this release reads", detail={"path": str(path)})
        strings = ("update_id", "nonce", "root", "install_root", "result_path")
        if not all(isinstance(data.get(k), str) and data[k] for k in strings):
            raise BadRequest(f"request {path} lacks one of {', '.join(strings)}", detail={"path": str(path)})
        for key in ("before", "after"):
            if data.get(key) is not None and not isinstance(data[key], str):
                raise BadRequest(f"request field {key!r} must be a commit or null", detail={"path": str(path)})
        # Schema 1 has neither: no plan, and a spec nobody knows (the completion diffs commits).
        plan = data.get("plan") if schema >= 2 else None
        spec = data.get("dependency_spec", UNKNOWN_SPEC) if schema >= 2 else UNKNOWN_SPEC
        if plan is not None and not isinstance(plan, dict):
            raise BadRequest("request field 'plan' must be an object or null", detail={"path": str(path)})
        if spec not in (None, UNKNOWN_SPEC) and not (isinstance(spec, str) and _DIGEST.fullmatch(spec)):
            raise BadRequest("request field 'dependency_spec' must be a sha256 or null", detail={"path": str(path)})
        return Request(
            update_id=data["update_id"],
            nonce=data["nonce"],
            root=data["root"],
            install_root=data["install_root"],
            before=data.get("before"),
            after=data.get("after"),
            result_path=data["result_path"],
            live_profiles=[p for p in data.get("live_profiles", []) if isinstance(p, str)],
            options=data.get("options") if isinstance(data.get("options"), dict) else {},
            plan=plan,
            dependency_spec=spec,
            schema=schema,
        )


class StepProgress(NamedTuple):
    """Where a running completion is: in ``step`` since ``started_at``, which may take ``bound``
    seconds; ``at`` is when it last said so."""

    pid: int
    step: str
    bound: float
    started_at: datetime
    at: datetime

    def to_dict(self, update_id: str) -> dict[str, Any]:
        return {
            "schema": PROGRESS_SCHEMA,
            "update_id": update_id,
            "pid": self.pid,
            "step": self.step,
            "bound": self.bound,
            "started_at": self.started_at.isoformat(timespec="milliseconds"),
            "at": self.at.isoformat(timespec="milliseconds"),
        }


def progress_path(result_path: str | Path) -> Path:
    """Where the completion answering at ``result_path`` keeps its progress: beside it."""
    return Path(str(result_path).removesuffix(".result.json") + ".progress.json")


def read_progress(path: Path, request: Request) -> StepProgress | None:
    """The progress the completion of ``request`` last wrote; None when there is none yet, or
    none of this update, or one of a shape this release does not read (then the updater waits
    on the whole completion's bound, as for a completion that writes none)."""
    try:
        data = read_json(path, default=None)
    except (OSError, HermesError):
        return None
    if not isinstance(data, dict) or data.get("schema") != PROGRESS_SCHEMA:
        return None
    if data.get("update_id") != request.update_id:
        return None
    pid, step, bound = data.get("pid"), data.get("step"), data.get("bound")
    if type(pid) is not int or pid <= 0 or not isinstance(step, str) or not step.strip():
        return None
    if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not bound > 0:
        return None
    if not (_moment(data.get("started_at")) and _moment(data.get("at"))):
        return None
    started_at, at = datetime.fromisoformat(data["started_at"]), datetime.fromisoformat(data["at"])
    return StepProgress(pid, step, float(bound), started_at, at)


def read_result(path: Path, request: Request) -> dict[str, Any] | None:
    """The completion's answer, only if it is for this very request (id AND nonce); None when
    there is none. A correlated answer of the wrong shape raises BadResult: checked here,
    whole, so that nothing takes half of it."""
    try:
        result = read_json(path, default=None)
    except (OSError, HermesError):
        return None
    if not result or result.get("update_id") != request.update_id or result.get("nonce") != request.nonce:
        return None
    check_result(result)
    return result


def check_result(result: dict[str, Any]) -> None:
    """Raise BadResult unless ``result`` has the shape every release's updater takes."""
    if result.get("schema") != RESULT_SCHEMA:
        raise BadResult(f"result schema {result.get('schema')!r} is not {RESULT_SCHEMA}")
    completion = result.get("completion")
    if not isinstance(completion, dict):
        raise BadResult("result field 'completion' must be an object")
    pid = completion.get("pid")
    if type(pid) is not int or pid <= 0:
        raise BadResult(f"result completion.pid must be a positive int, got {pid!r}")
    for key in ("code_sha", "code_version"):
        if completion.get(key) is not None and not isinstance(completion[key], str):
            raise BadResult(f"result completion.{key} must be a string or null")
    _entries(result, "steps", {"name": _text, "ok": _bool}, optional={"at": _moment})
    _entries(result, "skips", {"name": _text, "reason": _text}, optional={"at": _moment})
    _entries(result, "followups", {"step": _text, "reason": _text})
    _entries(result, "restart", {"ok": _bool})
    result_matrix(result)


def result_matrix(result: Mapping[str, Any]) -> list[MatrixRow]:
    """The fleet matrix of a result, row by row; BadResult names the first malformed field."""
    rows = result.get("fleet", [])
    if not isinstance(rows, list):
        raise BadResult("result field 'fleet' must be a list")
    try:
        return [MatrixRow.from_dict(row, f"result fleet[{i}]") for i, row in enumerate(rows)]
    except MalformedRow as exc:
        raise BadResult(exc.message, detail=exc.detail) from None


def _entries(
    result: dict[str, Any], key: str, required: dict[str, Any], optional: dict[str, Any] | None = None
) -> None:
    entries = result.get(key, [])
    if not isinstance(entries, list):
        raise BadResult(f"result field {key!r} must be a list")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise BadResult(f"result {key}[{i}] must be an object")
        for name, check in required.items():
            if name not in entry or not check(entry[name]):
                raise BadResult(f"result {key}[{i}].{name} is missing or malformed: {entry.get(name)!r}")
        for name, check in (optional or {}).items():
            if entry.get(name) is not None and not check(entry[name]):
                raise BadResult(f"result {key}[{i}].{name} is malformed: {entry[name]!r}")


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _bool(value: Any) -> bool:
    return type(value) is bool


def _moment(value: Any) -> bool:
    """An ISO timestamp with a timezone: what the receipt takes as a step's ``at``."""
    try:
        return isinstance(value, str) and datetime.fromisoformat(value).tzinfo is not None
    except ValueError:
        return False
