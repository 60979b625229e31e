"""``hermes profile list|create|show|delete``: anchored on the root home, whichever
profile is active. ``create --clone-from SOURCE`` starts the new profile with the source's
settings and identity (``hermes_cli.profile_clone``), and the home appears whole or not at all."""

from __future__ import annotations

import os
import secrets
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_cli import output
from hermes_cli.errors import ConfirmationRequired
from hermes_cli.gateway_liveness import STOPPED, GatewayLiveness, gateway_liveness
from hermes_cli.liveness import ServiceState, service_states
from hermes_cli.profile_clone import copy_profile_files
from shared import homes
from shared.files import StateFileCorrupt, read_json
from shared.homes import ProfileError
from shared.layout import GATEWAY_STATE_FILE
from shared.locks import FileLock, LockHeld


class ProfileExists(ProfileError):
    code = "profile_exists"


class ProfileBusy(ProfileError):
    code = "profile_busy"


def _describe(root: Path, names: list[str], active: str) -> list[dict[str, Any]]:
    """Each profile of ``names`` and its services; its gateway's as ``hermes gateway status``
    finds it (``gateway_liveness``), the others' by their endpoint locks."""
    states = {}
    for name in names:
        home = homes.profile_home(name, root)
        states[name] = service_states(home, is_root=name == homes.DEFAULT_PROFILE) if home.is_dir() else []
    locks = {name: s.lock for name, found in states.items() for s in found if s.service == "gateway"}
    gateways = gateway_liveness(root, locks)
    return [
        {
            "name": name,
            "home": str(homes.profile_home(name, root)),
            "active": name == active,
            "exists": homes.profile_home(name, root).is_dir(),
            "services": [_service(s, gateways.get(name)) for s in states[name]],
        }
        for name in names
    ]


def _service(state: ServiceState, gateway: GatewayLiveness | None) -> dict[str, Any]:
    described = state.to_dict()
    if state.service != "gateway" or gateway is None:
        return described
    return {**described, "live": gateway.live, "pid": gateway.pid, **_gateway_fields(gateway)}


def _gateway_fields(gateway: GatewayLiveness) -> dict[str, Any]:
    return {"state": gateway.state, "source": gateway.source, "error": gateway.error}


def _service_text(s: dict[str, Any]) -> str | None:
    """A service's words in LIVE SERVICES: a live one's pid; a gateway that is not live and not
    stopped (``offline``, ``refused``) its state."""
    if s["live"]:
        return f"{s['service']} (pid {s['pid']})" if s["pid"] is not None else s["service"]
    if s.get("state", STOPPED) != STOPPED:
        return f"{s['service']} {s['state']}"
    return None


def _live_names(profile: dict[str, Any]) -> str:
    return ", ".join(text for s in profile["services"] if (text := _service_text(s))) or "-"


def cmd_list(args) -> int:
    root, active = homes.root_home(), homes.active_profile()
    data = {"root": str(root), "active": active, "profiles": _describe(root, homes.list_profiles(root), active)}

    def text(d: dict[str, Any]) -> str:
        rows = [("*" if p["active"] else "", p["name"], p["home"], _live_names(p)) for p in d["profiles"]]
        return output.table(("", "PROFILE", "HOME", "LIVE SERVICES"), rows)

    output.emit(args, data, text)
    return 0


def cmd_create(args) -> int:
    name = _profile_name("profile_name", args.name)
    if name == homes.DEFAULT_PROFILE:
        raise homes.ProfileReserved(
            "'default' is the root home itself; it always exists", detail={"field": "profile_name", "name": name}
        )
    root = homes.root_home()
    cloned: dict[str, list[str]] = {}
    fill: Callable[[Path], None] | None = None
    if args.clone_from is not None:
        source = _clone_source(root, args.clone_from)

        def copy_source(home: Path) -> None:
            cloned["copied"], cloned["skipped"] = copy_profile_files(source, home)

        fill = copy_source
    try:
        home = homes.create_profile(root, name, fill=fill)
    except FileExistsError:
        home = homes.profile_home(name, root)
        raise ProfileExists(
            f"profile {name!r} already exists at {home}", detail={"field": "profile_name", "name": name}
        ) from None
    data: dict[str, Any] = {"name": name, "home": str(home)}
    if fill is not None:
        data["cloned_from"] = {"name": args.clone_from, **cloned}
    output.emit(args, data, _created_text)
    return 0


def _profile_name(field: str, value: str) -> str:
    try:
        return homes.validate_profile_name(value)
    except homes.InvalidProfileName as exc:
        raise homes.InvalidProfileName(f"{field}: {exc.message}", detail={"field": field, "name": value}) from None


def _clone_source(root: Path, source: str) -> Path:
    """The home ``--clone-from`` names: ``default`` (the root home) or a named profile there."""
    name = _profile_name("--clone-from", source)
    try:
        return homes.profile_home(name, root, must_exist=True)
    except homes.ProfileNotFound:
        raise homes.ProfileNotFound(
            f"--clone-from: no profile named {name!r} in {root}", detail={"field": "--clone-from", "name": name}
        ) from None


def _created_text(d: dict[str, Any]) -> str:
    line = f"created profile {d['name']} at {d['home']}"
    clone = d.get("cloned_from")
    if clone is None:
        return line
    line += f"\n  cloned from {clone['name']}: {', '.join(clone['copied']) or 'nothing to copy'}"
    if clone["skipped"]:
        line += f"\n  skipped (a link, or not a plain file): {', '.join(clone['skipped'])}"
    return line


def cmd_show(args) -> int:
    root, active = homes.root_home(), homes.active_profile()
    name = args.name or active
    homes.profile_home(name, root, must_exist=True)
    [data] = _describe(root, [name], active)
    home = Path(data["home"])
    run = homes.check_run_dir(home)
    data["run_dir"] = {"path": str(run.path), "exists": run.exists, "problems": list(run.problems)}
    data["gateway_state"] = _gateway_state(home / GATEWAY_STATE_FILE)

    def text(d: dict[str, Any]) -> str:
        lines = [
            f"profile   {d['name']}{' (active)' if d['active'] else ''}",
            f"home      {d['home']}",
            f"run dir   {_run_dir_text(d['run_dir'])}",
            f"gateway   {_gateway_text(d['gateway_state'])}",
            "services:",
        ]
        for s in d["services"]:
            state = _state_text(s)
            lines.append(f"  {s['service']:<14} {state:<22} {s['control']}")
        return "\n".join(lines)

    output.emit(args, data, text)
    return 0


def _state_text(s: dict[str, Any]) -> str:
    if s["live"]:
        said = s.get("state", "live")
        return f"{said}, pid {s['pid']}" if s["pid"] is not None else said
    if s.get("state", STOPPED) != STOPPED:
        return str(s["state"])
    return "not running"


def _gateway_state(path: Path) -> dict[str, Any]:
    """What the state file says, and whether the gateway it names still runs: a file a killed
    gateway left says it runs, and is never shown as running."""
    from fleet.discovery import LIVE_STATES
    from fleet.state_record import names_live_gateway

    try:
        state = read_json(path, default=None)
    except StateFileCorrupt as exc:
        return {"status": "corrupt", "reason": exc.reason}
    if state is None:
        return {"status": "absent"}
    said = state.get("gateway_state")
    alive = names_live_gateway(state) if said in LIVE_STATES else None
    return {
        "status": "present",
        "state": said if alive is not False else "ended",
        "said": said,
        "pid": state.get("pid"),
        "code_sha": state.get("code_sha"),
        "served_profiles": state.get("served_profiles"),
    }


def _gateway_text(g: dict[str, Any]) -> str:
    if g["status"] == "present" and g["state"] == "ended":
        return f"not running: its process (pid {g['pid']}) ended while {g['said']} (code {str(g['code_sha'])[:12]})"
    if g["status"] == "present":
        return f"{g['state']} (code {str(g['code_sha'])[:12]})"
    if g["status"] == "corrupt":
        return f"gateway_state.json is unreadable: {g['reason']}"
    return "no state file yet"


def _run_dir_text(r: dict[str, Any]) -> str:
    if not r["exists"]:
        return f"{r['path']} (not created yet)"
    return r["path"] + (f" — {'; '.join(r['problems'])}" if r["problems"] else "")


def cmd_delete(args) -> int:
    name = homes.validate_profile_name(args.name)
    if name == homes.DEFAULT_PROFILE:
        raise homes.ProfileReserved("the default profile is the root home and cannot be deleted", detail={"name": name})
    root = homes.root_home()
    home = homes.profile_home(name, root, must_exist=True)
    if not args.yes:
        _confirm(name)
    # Hold every endpoint lock of the profile while it is moved away: a live service makes
    # this fail, and no service can start in the middle. A multiplex gateway that serves it
    # among others lets it go first, and serves the others on.
    held: list[FileLock] = []
    released: dict[str, Any] | None = None
    try:
        for state in service_states(home, is_root=False):
            try:
                lock = _take(state.endpoint.lock_path)
            except LockHeld as exc:
                if state.service == "gateway" and (released := _released_by_multiplex(state.endpoint)) is not None:
                    lock = _take_once_let_go(state.endpoint.lock_path, name)
                else:
                    pid = exc.holder.pid if exc.holder else "unknown"
                    raise ProfileBusy(
                        f"profile {name!r} has a live {state.service} (pid {pid}); stop it first",
                        detail={"name": name, "service": state.service, "pid": pid},
                    ) from None
            except FileNotFoundError:
                continue
            held.append(lock)
        # Renaming first means a half-deleted profile is never listed as a profile.
        doomed = homes.profiles_dir(root) / f".deleting-{name}-{secrets.token_hex(4)}"
        os.rename(home, doomed)
    finally:
        for lock in held:
            lock.release()
    shutil.rmtree(doomed)
    for state in service_states(home, is_root=False):
        if state.endpoint.fallback:
            shutil.rmtree(state.endpoint.directory, ignore_errors=True)
    data = {"deleted": name, "home": str(home), "released_by_multiplex": released}
    output.emit(args, data, _deleted_text)
    return 0


def _deleted_text(d: dict[str, Any]) -> str:
    line = f"deleted profile {d['deleted']} ({d['home']})"
    released = d["released_by_multiplex"]
    if released:
        rest = ", ".join(released["served_profiles"])
        line += f"\n  its multiplex gateway let it go first and serves on: {rest}"
    return line


# How long a multiplex gateway's turns of the profile may finish, and its lock take to go.
RELEASE_DEADLINE = 30.0
RELEASE_WAIT = 10.0


def _take(path: Path) -> FileLock:
    lock = FileLock(path)
    lock.acquire()
    return lock


def _released_by_multiplex(endpoint: homes.Endpoint) -> dict[str, Any] | None:
    """The answer of the multiplex gateway at ``endpoint`` letting its profile go, or None when
    what holds the lock is not one (a per-profile gateway) or did not answer."""
    from hermes_cli.service_client import connect
    from shared.gateways import ops
    from shared.protocol import RemoteError
    from shared.transport import NO_RETRY

    try:
        with connect(endpoint, retry=NO_RETRY) as client:
            status = client.call(ops.STATUS, timeout=2.0)
            if not isinstance(status, dict) or len(status.get("served_profiles") or ()) < 2:
                return None
            answer = client.call(ops.RELEASE, {"deadline": RELEASE_DEADLINE}, timeout=RELEASE_DEADLINE + 10)
    except RemoteError:
        return None
    return answer if isinstance(answer, dict) else None


def _take_once_let_go(path: Path, name: str) -> FileLock:
    import time

    deadline = time.monotonic() + RELEASE_WAIT
    while True:
        try:
            return _take(path)
        except LockHeld as exc:
            if time.monotonic() >= deadline:
                pid = exc.holder.pid if exc.holder else "unknown"
                raise ProfileBusy(
                    f"profile {name!r} was released by its multiplex gateway (pid {pid}), "
                    f"which still held its lock after {RELEASE_WAIT:g}s",
                    detail={"name": name, "service": "gateway", "pid": pid},
                ) from None
            time.sleep(0.05)


def _confirm(name: str) -> None:
    if not sys.stdin.isatty():
        raise ConfirmationRequired(
            f"deleting profile {name!r} removes all its files; pass --yes to confirm", detail={"name": name}
        )
    answer = input(f"Delete profile {name!r} and all its files? Type its name to confirm: ")
    if answer.strip() != name:
        raise ConfirmationRequired("not confirmed; nothing was deleted", detail={"name": name})
