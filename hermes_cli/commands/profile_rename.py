"""``hermes profile rename OLD NEW``: the profile's home and everything named after it move
to NEW, its running gateway carried over; and the completion of a rename a kill interrupted.

The steps and what an interrupted rename does next are ``hermes_cli.profile_rename``'s; this module
takes them. A rename holds the install's rename lock from start to end, and OLD's endpoint
locks while its home moves, and writes its journal before every step. A gateway of OLD is
drained (its turns in flight finish; new ones are refused as ``draining``, never dropped) and
stopped by its supervisor, then started under NEW's unit once everything has moved: its
home, sockets, unit and environment all carry the name, so the process has to start again to
serve as NEW. A gateway no supervisor runs (nothing would start it again) or a multiplex one
(its served set is its mesh's to change) is refused before anything changes.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import time
from pathlib import Path
from typing import Any

from fleet.supervisors import HOST_KIND, Unit, kind_module
from hermes_cli import output
from hermes_cli import profile_rename as rules
from hermes_cli.commands.profile import ProfileBusy, ProfileExists
from hermes_cli.liveness import service_states
from shared import faults, homes
from shared.files import StateFileCorrupt, fsync_dir, read_json, write_bytes_atomic, write_json_atomic
from shared.locks import FileLock, LockHeld, probe

# Hermes Agent's sticky active profile, one name in the root home.
ACTIVE_POINTER_FILE = "active_profile"
# How long OLD's turns in flight may take to finish before its gateway stops.
DRAIN_DEADLINE = 60.0
# How long NEW's gateway has to answer as running once its supervisor has started it.
ANSWER_SECONDS = 30.0


def cmd_rename(args) -> int:
    old, new = rules.check_names(args.old_name, args.new_name)
    root = homes.root_home()
    with _RenameLock(root):
        finished = _finish_interrupted(root)
        journal = _plan(root, old, new)
        report = _run(root, journal, rules.STEPS)
    data = {**report, "finished_interrupted": finished}
    output.emit(args, data, _text)
    return 0


def finish_interrupted_rename(root: Path) -> dict[str, Any] | None:
    """Complete or undo a rename a kill left (what every ``hermes`` command does first); None
    when there is none, or a rename is under way in another process."""
    try:
        with _RenameLock(root):
            return _finish_interrupted(root)
    except ProfileBusy:
        return None


# --- the lock and the journal -----------------------------------------------------------------


class _RenameLock:
    """The install's one rename at a time, held until the rename is done; released by the kernel
    if its holder is killed, so a journal with a free lock was left by a dead rename."""

    def __init__(self, root: Path) -> None:
        homes.ensure_home(homes.profiles_dir(root))
        self._lock = FileLock(homes.profiles_dir(root) / rules.LOCK_FILE)

    def __enter__(self) -> None:
        try:
            self._lock.acquire()
        except LockHeld as exc:
            pid = exc.holder.pid if exc.holder else "unknown"
            raise ProfileBusy(
                f"another profile rename is under way (pid {pid}); wait for it to finish",
                detail={"field": "lock", "pid": pid},
            ) from None

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def _write(root: Path, journal: rules.Journal) -> rules.Journal:
    write_json_atomic(rules.journal_path(root), journal.to_dict())
    return journal


def _read(root: Path) -> rules.Journal | None:
    path = rules.journal_path(root)
    if path.is_symlink():
        raise rules.RenameJournalCorrupt(f"{path} is a symlink", detail={"reason": "symlink"})
    try:
        return rules.parse_journal(read_json(path, default=None, expect=None)) if path.exists() else None
    except StateFileCorrupt as exc:
        raise rules.RenameJournalCorrupt(f"the rename journal is unreadable: {exc.reason}", detail={}) from None


def _finish_interrupted(root: Path) -> dict[str, Any] | None:
    journal = _read(root)
    if journal is None:
        return None
    direction, steps = rules.resume(
        journal,
        old_home=homes.profile_home(journal.old, root).is_dir(),
        new_home=homes.profile_home(journal.new, root).is_dir(),
    )
    report = _run(root, journal, steps)
    return {**report, "direction": direction}


# --- planning ---------------------------------------------------------------------------------


def _plan(root: Path, old: str, new: str) -> rules.Journal:
    """Everything refused before anything changes; the journal of a rename that may go ahead."""
    old_home = homes.profile_home(old, root)
    if not old_home.is_dir() or old_home.is_symlink():
        raise homes.ProfileNotFound(f"no profile named {old!r} in {root}", detail={"field": "old_name", "name": old})
    _refuse_taken(root, new)
    endpoint = homes.endpoint(old_home, "gateway", create=False)
    if endpoint.tcp is not None:
        raise rules.RenameUnsupported(
            f"profile {old!r}'s gateway is on TCP as {endpoint.key_name}, a name its clients and CURVE keys "
            f"share; move it off TCP (mesh.tcp), rename, then set gateway@{new}",
            detail={"field": "old_name", "name": old, "key_name": endpoint.key_name},
        )
    from hermes_cli.commands.gateway_manage import find_owner

    unit = find_owner(old, old_home)
    running = _gateway_live(old_home)
    if unit is not None and unit.name == _multiplex_program():
        raise ProfileBusy(
            f"profile {old!r} is served by the mesh's multiplex gateway; take it out of `--serve` first",
            detail={"field": "old_name", "name": old, "service": "gateway"},
        )
    if unit is not None and unit.kind == HOST_KIND:
        raise ProfileBusy(
            f"profile {old!r} is a gateway of the mesh's gateway host; take it out of the host's profiles first",
            detail={"field": "old_name", "name": old, "service": "gateway"},
        )
    if running and unit is None:
        pid = _gateway_pid(old_home)
        raise ProfileBusy(
            f"profile {old!r} has a live gateway (pid {pid}) no supervisor runs, so nothing would start "
            "it again as the new name; stop it first",
            detail={"field": "old_name", "name": old, "service": "gateway", "pid": pid},
        )
    gateway = None if unit is None else rules.Gateway(unit.kind, unit.scope, running)
    return _write(root, rules.Journal(old, new, rules.DRAIN, gateway))


def _refuse_taken(root: Path, new: str) -> None:
    new_home = homes.profile_home(new, root)
    try:
        st = os.lstat(new_home)
    except FileNotFoundError:
        return
    what = "a symlink" if stat.S_ISLNK(st.st_mode) else "there"
    raise ProfileExists(
        f"profile {new!r} already exists: {new_home} is {what}",
        detail={"field": "new_name", "name": new, "path": str(new_home)},
    )


def _multiplex_program() -> str:
    from fleet.supervisors.supervisord import MULTIPLEX_PROGRAM

    return MULTIPLEX_PROGRAM


def _gateway_live(home: Path) -> bool:
    return any(s.live for s in service_states(home, is_root=False) if s.service == "gateway")


def _gateway_pid(home: Path) -> int | str:
    lock = probe(homes.endpoint(home, "gateway", create=False).lock_path)
    return lock.holder.pid if lock.held and lock.holder else "unknown"


# --- the steps --------------------------------------------------------------------------------


def _run(root: Path, journal: rules.Journal, steps: tuple[str, ...]) -> dict[str, Any]:
    """Take ``steps`` in order, writing the journal before each. A failure before the home has
    moved undoes the rename at once; one after it leaves the journal for the next command."""
    report: dict[str, Any] = {"old": journal.old, "new": journal.new, "home": None, "gateway": None}
    for step in steps:
        faults.pause_at(f"profile-rename-{step}")
        if step == rules.RESTART_OLD:
            report["gateway"] = _restart_old(root, journal)
            rules.journal_path(root).unlink(missing_ok=True)
            report["home"] = str(homes.profile_home(journal.old, root))
            report["rolled_back"] = True
            continue
        journal = _write(root, journal.at(step))
        try:
            outcome = _STEPS[step](root, journal)
        except BaseException:
            if step == rules.DRAIN or (step == rules.MOVE_HOME and _home_unmoved(root, journal)):
                _run(root, journal, (rules.RESTART_OLD,))
            raise
        if outcome is not None:
            report.update(outcome)
    return report


def _home_unmoved(root: Path, journal: rules.Journal) -> bool:
    return homes.profile_home(journal.old, root).is_dir() and not os.path.lexists(homes.profile_home(journal.new, root))


def _unit(journal: rules.Journal, profile: str, root: Path) -> Unit | None:
    if journal.gateway is None:
        return None
    module = kind_module(journal.gateway.kind)
    return Unit(
        kind=journal.gateway.kind,
        name=module.unit_name(profile),
        profile=profile,
        home=homes.profile_home(profile, root),
        scope=journal.gateway.scope,
    )


def _drain(root: Path, journal: rules.Journal) -> None:
    """OLD's turns in flight finish (new ones are refused as draining), then its supervisor stops it."""
    unit = _unit(journal, journal.old, root)
    if unit is None or journal.gateway is None or not journal.gateway.running:
        return
    old_home = homes.profile_home(journal.old, root)
    if _gateway_live(old_home):
        _ask_drain(old_home)
    faults.step()
    kind_module(unit.kind).stop(unit)


def _ask_drain(home: Path) -> None:
    from hermes_cli.service_client import connect
    from shared.gateways import ops
    from shared.protocol import RemoteError
    from shared.transport import NO_RETRY

    try:
        with connect(homes.endpoint(home, ops.SERVICE, create=False), retry=NO_RETRY) as client:
            client.call(ops.DRAIN, {"deadline": DRAIN_DEADLINE, "stay": True}, timeout=DRAIN_DEADLINE + 10)
    except RemoteError:
        pass  # gone already, or not answering: its supervisor's stop is the drain then


def _move_home(root: Path, journal: rules.Journal) -> None:
    """The point of no return: OLD's home becomes NEW's in one rename, while OLD's endpoint
    locks are held, so no service of OLD runs or starts in between."""
    old_home, new_home = homes.profile_home(journal.old, root), homes.profile_home(journal.new, root)
    if not old_home.is_dir() and new_home.is_dir():
        return  # moved already, by the run a kill interrupted
    _refuse_taken(root, journal.new)
    held: list[FileLock] = []
    try:
        for state in service_states(old_home, is_root=False):
            lock = FileLock(state.endpoint.lock_path)
            try:
                lock.acquire()
            except FileNotFoundError:
                continue
            except LockHeld as exc:
                pid = exc.holder.pid if exc.holder else "unknown"
                raise ProfileBusy(
                    f"profile {journal.old!r} has a live {state.service} (pid {pid}) that its supervisor "
                    "did not stop; nothing was renamed",
                    detail={"field": "old_name", "name": journal.old, "service": state.service, "pid": pid},
                ) from None
            held.append(lock)
        faults.step()
        os.rename(old_home, new_home)
        fsync_dir(homes.profiles_dir(root))
    finally:
        for lock in held:
            lock.release()


def _move_units(root: Path, journal: rules.Journal) -> dict[str, Any] | None:
    if journal.gateway is None:
        return None
    kind, scope = journal.gateway.kind, journal.gateway.scope
    module = kind_module(kind)
    faults.step()
    if kind == "supervisord":
        unit = module.rename(journal.old, journal.new, root)
    else:
        unit = module.rename(journal.old, journal.new, homes.profile_home(journal.new, root), scope=scope)
    return {
        "unit": {"kind": unit.kind, "name": unit.name, "scope": unit.scope, "replaced": module.unit_name(journal.old)}
    }


def _move_obligations(root: Path, journal: rules.Journal) -> dict[str, Any]:
    from nous.guest_handoff.records import rename_profile
    from services.updater import rename_gateway

    faults.step()
    restart_owed = rename_gateway(root, journal.old, journal.new)
    faults.step()
    handoffs = rename_profile(root, journal.old, journal.new)
    faults.step()
    pointer = _move_active_pointer(root, journal.old, journal.new)
    return {"obligations": {"restart_owed": restart_owed, "handoffs": handoffs}, "active_pointer_moved": pointer}


def _move_active_pointer(root: Path, old: str, new: str) -> bool:
    path = root / ACTIVE_POINTER_FILE
    if path.is_symlink():
        return False  # never written through a link
    try:
        named = path.read_text(encoding="utf-8").strip()
    except (FileNotFoundError, UnicodeDecodeError):
        return False
    if named != old:
        return False
    write_bytes_atomic(path, f"{new}\n".encode())
    return True


def _start_gateway(root: Path, journal: rules.Journal) -> dict[str, Any] | None:
    unit = _unit(journal, journal.new, root)
    if unit is None or journal.gateway is None or not journal.gateway.running:
        return None
    return {"gateway": _start(unit)}


def _restart_old(root: Path, journal: rules.Journal) -> dict[str, Any] | None:
    unit = _unit(journal, journal.old, root)
    if unit is None or journal.gateway is None or not journal.gateway.running or _gateway_live(unit.home):
        return None
    return _start(unit)


def _start(unit: Unit) -> dict[str, Any]:
    faults.step()
    kind_module(unit.kind).start(unit)
    return {"kind": unit.kind, "unit": unit.name, "profile": unit.profile, "pid": _answering(unit.home)}


def _answering(home: Path) -> int | None:
    """The pid of the gateway at ``home`` once it answers as running (bounded), else None."""
    from hermes_cli.service_client import connect
    from shared.gateways import ops
    from shared.protocol import RemoteError
    from shared.transport import NO_RETRY

    deadline = time.monotonic() + ANSWER_SECONDS
    while time.monotonic() < deadline:
        try:
            with connect(homes.endpoint(home, ops.SERVICE, create=False), retry=NO_RETRY) as client:
                status = client.call(ops.STATUS, timeout=2.0)
        except RemoteError:
            status = {}
        if isinstance(status, dict) and status.get("state") == ops.RUNNING:
            return status.get("pid")
        time.sleep(0.1)
    return None


def _finish(root: Path, journal: rules.Journal) -> dict[str, Any]:
    """OLD's short socket directory, if its home was too deep for one in ``run/``, then the journal."""
    old_home = homes.profile_home(journal.old, root)
    try:
        endpoint = homes.endpoint(old_home, "gateway", create=False)
    except homes.EndpointPathTooLong:
        endpoint = None
    if endpoint is not None and endpoint.fallback:
        faults.step()
        shutil.rmtree(endpoint.directory, ignore_errors=True)
    faults.step()
    rules.journal_path(root).unlink(missing_ok=True)
    return {"home": str(homes.profile_home(journal.new, root))}


_STEPS = {
    rules.DRAIN: _drain,
    rules.MOVE_HOME: _move_home,
    rules.MOVE_UNITS: _move_units,
    rules.MOVE_OBLIGATIONS: _move_obligations,
    rules.START_GATEWAY: _start_gateway,
    rules.FINISH: _finish,
}


# --- text -------------------------------------------------------------------------------------


def _text(d: dict[str, Any]) -> str:
    lines = []
    done = d.get("finished_interrupted")
    if done:
        how = "undid" if done.get("rolled_back") else "finished"
        lines.append(f"{how} the interrupted rename of {done['old']} to {done['new']}")
    lines.append(f"renamed profile {d['old']} to {d['new']} ({d['home']})")
    unit = d.get("unit")
    if unit:
        lines.append(f"  its {unit['kind']} unit is now {unit['name']} (was {unit['replaced']})")
    gateway = d.get("gateway")
    if gateway:
        pid = gateway["pid"] if gateway["pid"] is not None else "not answering yet"
        lines.append(f"  its gateway serves as {d['new']} again (pid {pid})")
    if d.get("active_pointer_moved"):
        lines.append(f"  the active profile is now {d['new']}")
    return "\n".join(lines)


def warn_of_interrupted_rename(root: Path) -> None:
    """Finish a rename a kill interrupted, saying so on stderr; a failure is reported, not raised:
    the command the user ran goes on."""
    from shared.errors import HermesError

    try:
        done = finish_interrupted_rename(root)
    except HermesError as exc:
        print(f"hermes: an interrupted profile rename could not be finished: {exc.message}", file=sys.stderr)
        return
    if done is not None:
        how = "undid" if done.get("rolled_back") else "finished"
        print(f"hermes: {how} the interrupted rename of profile {done['old']} to {done['new']}", file=sys.stderr)
