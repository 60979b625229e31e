"""What a committed update still owes, kept in the ROOT home until it is done.

After the commit point nothing fails an update, so whatever its tail could not finish must
outlive the run that owed it. Each obligation is one JSON file under ``<root>/obligations/``,
replaced atomically under a lock:

- ``source-completion-pending.json``: the tree moved and no completion has yet delivered a
  correlated result that owes nothing of the tail (dependencies, config migrations). Armed by
  the updater just ahead of the commit point (and withdrawn if the tree does not move after
  all), so no kill can leave a moved tree owing nothing, with the update id, the code
  before and after and the dependency spec's digest from before the move (a retry decides
  from it whether to sync the dependencies); it also
  names the last completion started for it, so a result that completion delivered after its
  updater died is still taken.
- ``fleet-restart.json``: the gateways owed a restart onto the new code, profile -> the
  commit it should run and why. The updater writes it whole whenever it knows the fleet: at
  the commit point (every gateway that should run the new code) and after every verify (the
  stale ones, and those down that should run). A gateway's part is cleared as soon as it is
  seen running the commit expected of it (an update's verify, ``hermes gateway
  start|restart``); the file is removed when nothing is owed.
- ``home-restore-pending.json``: a rollback restores the root home from a ``--backup``
  archive. Armed just ahead of the move and cleared once every file is back, so a kill
  mid-restore leaves it owed and the next update restores again (``home_restore``).
- ``stash-pending.json``: the operator's local change to tracked files, stashed around the
  fast-forward and not yet put back, by the stash commit's sha (never ``stash@{N}``: the
  operator's own entries shift it), with the commit it was made over and its paths. Armed by
  the updater once the stash commit exists and before the tree is cleaned or moved; cleared
  once the change is back in the tree, or handed to the operator in a receipt's
  ``user_action``.
- ``confirm-pending.json``: an update run with ``--confirm-within`` rolls back at its deadline
  unless confirmed (``services.updater.confirm``, which reads and writes it).

The next ``hermes update``, already up to date or not, retries every one. While a fleet restart is
owed every ``hermes`` command prints ``restart_warning`` on stderr. That check runs on every
CLI start, so at load time this module imports only ``os``, ``time`` and ``shared.home_env``,
and where nothing is owed the check is one ``stat``; json, pathlib, ``shared.errors``,
``shared.files`` (writes, corrupt-file errors) and ``shared.version`` are imported where they
are used.
"""

from __future__ import annotations

import os
import time

from shared.home_env import root_home_path

TYPE_CHECKING = False  # typing's own flag without importing typing; mypy reads it as true
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path
    from typing import Any

    from shared.errors import HermesError

SCHEMA = 1
DIRECTORY = "obligations"
COMPLETION_FILE = "source-completion-pending.json"
FLEET_FILE = "fleet-restart.json"
RESTORE_FILE = "home-restore-pending.json"
STASH_FILE = "stash-pending.json"
CONFIRM_FILE = "confirm-pending.json"

# Why a gateway is owed a restart.
NOT_RESTARTED = "not-restarted"  # the code moved and nothing has restarted it yet
STALE = "stale"  # it runs other code than expected
DOWN = "down"  # it should run and does not
STATES = frozenset({NOT_RESTARTED, STALE, DOWN})

# A pending completion's ``dependency_spec`` when nobody knows it (armed by an older release,
# which did not record it): not a digest, so it never matches one.
UNKNOWN_SPEC = "unknown"


def now_text() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# --- where ------------------------------------------------------------------------------------


def _path(root: Path, name: str) -> Path:
    from pathlib import Path

    return Path(root) / DIRECTORY / name


def completion_path(root: Path) -> Path:
    return _path(root, COMPLETION_FILE)


def fleet_path(root: Path) -> Path:
    return _path(root, FLEET_FILE)


def restore_path(root: Path) -> Path:
    return _path(root, RESTORE_FILE)


def stash_path(root: Path) -> Path:
    return _path(root, STASH_FILE)


def confirm_path(root: Path) -> Path:
    return _path(root, CONFIRM_FILE)


def confirm_owed(env: Mapping[str, str] | None = None) -> bool:
    """Whether an update waits for its confirm (``services.updater.confirm``): one ``stat``."""
    return os.path.lexists(os.path.join(root_home_path(env), DIRECTORY, CONFIRM_FILE))


# --- reading ------------------------------------------------------------------------------------


def _corrupt(path: Path, reason: str) -> HermesError:
    from shared.files import StateFileCorrupt

    return StateFileCorrupt(path, reason)


def load(path: Path) -> dict[str, Any] | None:
    """The obligation in ``path``, or None when nothing is owed; a file of any other shape raises
    ``StateFileCorrupt``."""
    import json

    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw)
    except ValueError as exc:  # torn, not UTF-8, not JSON
        raise _corrupt(path, f"not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise _corrupt(path, f"not a schema {SCHEMA} obligation")
    return data


def _sha(value: object) -> bool:
    return value is None or isinstance(value, str)


def read_completion(root: Path) -> dict[str, Any] | None:
    """``{schema, update_id, armed_at, before, after, dependency_spec, attempt}`` while a completion
    is owed, else None.

    ``attempt`` is None or ``{update_id, request, result}``: the last completion started for it.
    ``dependency_spec`` is the spec's digest before the move, None (there was no spec) or
    ``UNKNOWN_SPEC`` (also when an older release armed it without one).
    """
    path = completion_path(root)
    data = load(path)
    if data is None:
        return None
    attempt = data.get("attempt")
    shaped = (
        isinstance(data.get("update_id"), str)
        and _sha(data.get("before"))
        and _sha(data.get("after"))
        and _sha(data.setdefault("dependency_spec", UNKNOWN_SPEC))
        and (
            attempt is None
            or (
                isinstance(attempt, dict)
                and all(isinstance(attempt.get(k), str) for k in ("update_id", "request", "result"))
            )
        )
    )
    if not shaped:
        raise _corrupt(path, "not a pending completion (update_id, before, after, attempt)")
    return data


def read_fleet(root: Path) -> dict[str, dict[str, Any]]:
    """profile -> ``{expected, state, reason, update_id}`` for every gateway owed a restart."""
    path = fleet_path(root)
    data = load(path)
    if data is None:
        return {}
    gateways = data.get("gateways")
    if not isinstance(gateways, dict) or not all(
        isinstance(part, dict) and _sha(part.get("expected")) and part.get("state") in STATES
        for part in gateways.values()
    ):
        raise _corrupt(path, "not a fleet-restart obligation (gateways: profile -> {expected, state, ...})")
    return gateways


def read_restore(root: Path) -> dict[str, Any] | None:
    """``{schema, update_id, armed_at, target, backup: {path, sha256}}`` while a rollback's restore
    of the root home from ``backup`` is owed (the tree moves, or moved, to ``target``), else None."""
    path = restore_path(root)
    data = load(path)
    if data is None:
        return None
    backup = data.get("backup")
    if not (
        isinstance(data.get("update_id"), str)
        and isinstance(data.get("target"), str)
        and isinstance(backup, dict)
        and all(isinstance(backup.get(k), str) for k in ("path", "sha256"))
    ):
        raise _corrupt(path, "not a pending home restore (update_id, target, backup)")
    return data


def read_stash(root: Path) -> dict[str, Any] | None:
    """``{schema, update_id, stashed_at, sha, before, paths}`` while a stash of the operator's
    change is owed back, else None."""
    from shared.version import is_commit_sha

    path = stash_path(root)
    data = load(path)
    if data is None:
        return None
    paths = data.get("paths")
    shaped = (
        isinstance(data.get("update_id"), str)
        and is_commit_sha(data.get("sha"))
        and is_commit_sha(data.get("before"))
        and isinstance(paths, list)
        and all(isinstance(p, str) for p in paths)
    )
    if not shaped:
        raise _corrupt(path, "not a pending stash (update_id, sha, before, paths)")
    return data


# The kinds of obligation ``owed_counts`` names, each with its reader.
OWED_KINDS = ("completion", "fleet_restart", "home_restore", "stash", "confirm")


def owed_counts(root: Path) -> dict[str, int]:
    """kind -> how much of it is owed: the gateways owed a restart for ``fleet_restart``, 1 or 0
    for the others. A file that cannot be read counts as owed, as the next update takes it."""
    from shared.errors import HermesError

    readers: dict[str, Callable[[Path], object]] = {
        "completion": read_completion,
        "fleet_restart": read_fleet,
        "home_restore": read_restore,
        "stash": read_stash,
        "confirm": lambda r: True if os.path.lexists(confirm_path(r)) else None,  # its shape is ``confirm``'s
    }
    counts = {}
    for kind in OWED_KINDS:
        try:
            owed = readers[kind](root)
        except HermesError:
            counts[kind] = 1
            continue
        counts[kind] = len(owed) if kind == "fleet_restart" else int(owed is not None)  # type: ignore[arg-type]
    return counts


def restart_warning(env: Mapping[str, str] | None = None) -> str | None:
    """The one line every ``hermes`` command prints while a fleet restart is owed, else None.

    One ``stat`` where nothing is owed, one small file read where something is: no sockets,
    no process scan, nothing heavy imported.
    """
    try:
        os.lstat(os.path.join(root_home_path(env), DIRECTORY, FLEET_FILE))
    except FileNotFoundError:
        return None  # nothing owed: the common case, answered without json or pathlib
    except OSError:
        pass  # the read says what is wrong
    from pathlib import Path

    from shared.errors import HermesError

    try:
        owed = read_fleet(Path(root_home_path(env)))
    except HermesError as exc:
        return f"⚠ {exc.message}: run `hermes update`"
    except OSError as exc:
        return f"⚠ cannot read {exc.filename}: {exc.strerror}"
    if not owed:
        return None
    names = ", ".join(f"{name}: down" if part["state"] == DOWN else name for name, part in owed.items())
    if all(part["state"] != DOWN for part in owed.values()):
        verb = "still runs" if len(owed) == 1 else "still run"
        return f"⚠ {len(owed)} gateway{'s' if len(owed) > 1 else ''} {verb} old code ({names}): run `hermes update`"
    return (
        f"⚠ {len(owed)} gateway{'s are' if len(owed) > 1 else ' is'} not on the new code ({names}): "
        "run `hermes update`; start a down one with `hermes -p NAME gateway start`"
    )


# --- writing (only the updater and the gateway commands) ---------------------------------------


def locked_change(path: Path, change: Callable[[], None]) -> None:
    from shared.files import locked

    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path):
        change()


def put(path: Path, data: dict[str, Any] | None) -> None:
    """Under the path's lock: replace it atomically, or remove it (``None``: nothing owed)."""
    from shared.files import write_json_atomic

    if data is None:
        path.unlink(missing_ok=True)
    else:
        write_json_atomic(path, data)


def arm_completion(
    root: Path,
    *,
    update_id: str,
    before: str | None,
    after: str | None,
    attempt: dict[str, str] | None = None,
    dependency_spec: str | None = UNKNOWN_SPEC,
) -> None:
    """A completion of ``before`` -> ``after`` is owed (for update ``update_id``); ``attempt``
    names the completion last started for it (``{update_id, request, result}``);
    ``dependency_spec`` is the spec's digest before the move."""
    path = completion_path(root)
    record = {
        "schema": SCHEMA,
        "update_id": update_id,
        "armed_at": now_text(),
        "before": before,
        "after": after,
        "dependency_spec": dependency_spec,
        "attempt": attempt,
    }
    locked_change(path, lambda: put(path, record))


def clear_completion(root: Path) -> None:
    path = completion_path(root)
    locked_change(path, lambda: put(path, None))


def arm_restore(root: Path, *, update_id: str, target: str, backup: Mapping[str, Any]) -> None:
    """A restore of the root home from ``backup`` is owed by rollback ``update_id`` to ``target``."""
    path = restore_path(root)
    record = {
        "schema": SCHEMA,
        "update_id": update_id,
        "armed_at": now_text(),
        "target": target,
        "backup": {"path": backup["path"], "sha256": backup["sha256"]},
    }
    locked_change(path, lambda: put(path, record))


def clear_restore(root: Path) -> None:
    path = restore_path(root)
    locked_change(path, lambda: put(path, None))


def owed_part(expected: str | None, state: str, reason: str, update_id: str) -> dict[str, Any]:
    """One gateway's debt: the commit it should run, why it does not (one of ``STATES``), who found it."""
    if state not in STATES:
        raise ValueError(f"unknown state {state!r}; known: {', '.join(sorted(STATES))}")
    return {"expected": expected, "state": state, "reason": reason, "update_id": update_id}


def replace_fleet(root: Path, parts: Mapping[str, dict[str, Any]]) -> None:
    """Exactly ``parts`` is owed now (the updater knows: the code just moved, or it verified the
    whole fleet); everything else is cleared."""
    path = fleet_path(root)
    locked_change(path, lambda: put(path, {"schema": SCHEMA, "gateways": dict(parts)} if parts else None))


def clear_gateway(root: Path, profile: str, running: str | None) -> bool:
    """Clear ``profile``'s part if the gateway runs the commit expected of it; True if it did."""
    if profile not in read_fleet(root):
        return False  # nothing owed: no lock, no write
    path = fleet_path(root)
    cleared: list[str] = []

    def change() -> None:
        owed = read_fleet(root)
        part = owed.get(profile)
        if part is not None and running is not None and part["expected"] == running:
            del owed[profile]
            cleared.append(profile)
            put(path, {"schema": SCHEMA, "gateways": owed} if owed else None)

    locked_change(path, change)
    return bool(cleared)


def rename_gateway(root: Path, old: str, new: str) -> bool:
    """A renamed profile's gateway still owes its restart, under its new name; True if one was owed."""
    if old not in read_fleet(root):
        return False  # nothing owed: no lock, no write
    path = fleet_path(root)
    moved: list[str] = []

    def change() -> None:
        owed = read_fleet(root)
        if old in owed:
            owed[new] = owed.pop(old)
            moved.append(new)
            put(path, {"schema": SCHEMA, "gateways": owed})

    locked_change(path, change)
    return bool(moved)


def arm_stash(root: Path, *, update_id: str, sha: str, before: str, paths: list[str]) -> None:
    """The operator's change is in the stash commit ``sha`` (made over ``before``) until put back."""
    from shared.version import is_commit_sha

    if not (is_commit_sha(sha) and is_commit_sha(before)):
        raise ValueError(f"not commit ids: {sha!r}, {before!r}")
    path = stash_path(root)
    record = {
        "schema": SCHEMA,
        "update_id": update_id,
        "stashed_at": now_text(),
        "sha": sha,
        "before": before,
        "paths": list(paths),
    }
    locked_change(path, lambda: put(path, record))


def clear_stash(root: Path) -> None:
    path = stash_path(root)
    locked_change(path, lambda: put(path, None))
