"""``hermes doctor``: is this install able to run its services?

Checks the interpreter and dependencies, every profile's home and private ``run/`` dir,
each service's IPC path (and whether it had to fall back to a short private directory),
the endpoint locks, and every service of the other hosts this home sees
(``hermes_cli.host_checks``). A run dir (or short private dir) that is not private is a failed
permissions finding, and no socket in it is asked. Exit 0 when nothing failed (warnings
allowed), else 1.
"""

from __future__ import annotations

import importlib
import os
import stat
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hermes_cli import output
from hermes_cli.doctor_check import FAIL, OK, WARN, Check
from hermes_cli.gateway_liveness import GatewayLiveness, gateway_liveness
from hermes_cli.host_checks import host_checks
from hermes_cli.liveness import service_states
from shared import homes
from shared.locks import probe
from shared.version import INSTALL_ROOT, __version__, code_sha

_MARKS = {OK: "ok  ", WARN: "warn", FAIL: "FAIL"}

DEPENDENCIES = ("trio", "zmq", "msgpack", "psutil", "httpx")


def _python() -> Check:
    version = ".".join(map(str, sys.version_info[:3]))
    status = OK if sys.version_info >= (3, 11) else FAIL
    return Check("python", status, f"Python {version} at {sys.executable}", {"version": version})


def _dependencies() -> list[Check]:
    checks = []
    for name in DEPENDENCIES:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            checks.append(Check(f"dependency {name}", FAIL, f"cannot import {name}: {exc}"))
            continue
        version = getattr(module, "__version__", "unknown")
        message, status = f"{name} {version}", OK
        if name == "zmq":
            message += f" (libzmq {module.zmq_version()})"
            from shared.transport import curve

            problem = curve.libzmq_problem(module.zmq_version_info())
            if problem is not None:
                message, status = f"{message}: TCP is refused, {problem}", WARN
        checks.append(Check(f"dependency {name}", status, message, {"version": version}))
    return checks


def _install() -> Check:
    sha = code_sha()
    status = OK if sha else WARN
    where = f"hermes-mesh {__version__} at {INSTALL_ROOT}"
    message = f"{where}, commit {sha[:12]}" if sha else f"{where}: not a git checkout, updates cannot run in place"
    return Check("install", status, message, {"version": __version__, "root": str(INSTALL_ROOT), "code_sha": sha})


def _home(root: Path) -> Check:
    try:
        st = os.stat(root)
    except FileNotFoundError:
        return Check(
            "root home",
            WARN,
            f"{root} does not exist yet (created by the first profile or service)",
            {"path": str(root)},
        )
    mode = stat.S_IMODE(st.st_mode)
    writable = os.access(root, os.W_OK | os.X_OK)
    status = OK if writable else FAIL
    message = f"{root} (mode {mode:04o})" + ("" if writable else ": not writable by this user")
    if mode & 0o002:
        status, message = FAIL, f"{root} is world-writable (mode {mode:04o})"
    return Check("root home", status, message, {"path": str(root), "mode": f"{mode:04o}"})


def _profile_checks(root: Path, name: str, gateways: dict[str, GatewayLiveness]) -> list[Check]:
    home = homes.profile_home(name, root)
    run = homes.check_run_dir(home)
    prefix = f"profile {name}"
    checks = []
    if not run.exists:
        checks.append(
            Check(
                f"{prefix}: run dir",
                OK,
                f"{run.path} not created yet (made 0700 on first use)",
                {"path": str(run.path)},
            )
        )
    elif run.problems:
        checks.append(
            Check(
                f"{prefix}: run dir",
                FAIL,
                f"{run.path} {'; '.join(run.problems)}",
                {"path": str(run.path), "problems": list(run.problems)},
            )
        )
    else:
        checks.append(Check(f"{prefix}: run dir", OK, f"{run.path} is private", {"path": str(run.path)}))
    try:
        states = service_states(home, is_root=name == homes.DEFAULT_PROFILE)
    except homes.EndpointPathTooLong as exc:
        return [*checks, Check(f"{prefix}: ipc paths", FAIL, exc.message, exc.detail or {})]
    except homes.UnsafeRunDir as exc:  # no socket in it is asked; the run dir's finding says why
        if (exc.detail or {}).get("path") == str(run.path):
            return checks
        return [*checks, Check(f"{prefix}: ipc dir", FAIL, exc.message, exc.detail or {})]
    for state in states:
        ep = state.endpoint
        path_len = len(os.fsencode(ep.control[len("ipc://") :]))
        where = f"short private dir {ep.directory}" if ep.fallback else "run dir"
        lock = state.lock
        if lock.held:
            pid = lock.holder.pid if lock.holder else "unknown"
            lock_text = f"live (pid {pid})"
        elif lock.exists:
            lock_text = "stale lock file, free (harmless: the lock died with its holder)"
        else:
            lock_text = "not running"
        status, detail = OK, {"live": lock.held, "pid": lock.holder.pid if lock.holder and lock.held else None}
        gateway = gateways.get(name) if state.service == "gateway" else None
        # As `hermes gateway status` finds it, or why it could not be asked.
        if gateway is not None and (gateway.source != "lock" or gateway.error is not None):
            lock_text = _gateway_text(gateway)
            status = WARN if gateway.error is not None and not gateway.live else OK
            detail = {"live": gateway.live, "pid": gateway.pid, **gateway._asdict()}
        place = f"on TCP {ep.control}" if ep.tcp is not None else f"{path_len}/{homes.IPC_PATH_MAX} bytes in {where}"
        checks.append(
            Check(
                f"{prefix}: {state.service}",
                status,
                f"{place}; {lock_text}",
                {
                    "control": ep.control,
                    "path_bytes": path_len,
                    "fallback": ep.fallback,
                    "stale_lock": lock.stale,
                    **detail,
                },
            )
        )
    return checks


def _gateway_text(gateway: GatewayLiveness) -> str:
    if gateway.live:
        return f"{gateway.state} (pid {gateway.pid}, found by its {gateway.source.replace('_', ' ')})"
    if gateway.error is not None:
        return f"{gateway.state}: {gateway.error['code']}"
    return gateway.state


def _gateways(root: Path, profiles: list[str]) -> dict[str, GatewayLiveness]:
    """Each profile's gateway as ``hermes gateway status`` finds it; a profile whose endpoint
    cannot be made is left to its own finding."""
    locks = {}
    for name in profiles:
        try:
            endpoint = homes.endpoint(homes.profile_home(name, root), "gateway", create=False)
        except (homes.EndpointPathTooLong, homes.UnsafeRunDir):
            continue
        locks[name] = probe(endpoint.lock_path)
    return gateway_liveness(root, locks)


def run_checks() -> list[Check]:
    root = homes.root_home()
    checks = [_python(), *_dependencies(), _install(), _home(root)]
    profiles = homes.list_profiles(root)
    gateways = _gateways(root, profiles)
    for name in profiles:
        checks.extend(_profile_checks(root, name, gateways))
    checks.extend(host_checks(root))
    return checks


def cmd_doctor(args) -> int:
    checks = run_checks()
    failed = [c for c in checks if c.status == FAIL]
    data = {
        "ok": not failed,
        "root": str(homes.root_home()),
        "active_profile": homes.active_profile(),
        "checks": [asdict(c) for c in checks],
    }

    def text(d: dict[str, Any]) -> str:
        lines = [f"hermes doctor — root home {d['root']}, active profile {d['active_profile']}", ""]
        lines += [f"[{_MARKS[c['status']]}] {c['name']}: {c['message']}" for c in d["checks"]]
        warned = sum(c["status"] == WARN for c in d["checks"])
        lines += ["", f"{len(failed)} failed, {warned} warnings, {len(d['checks'])} checks"]
        return "\n".join(lines)

    output.emit(args, data, text)
    return 0 if not failed else 1
