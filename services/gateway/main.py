"""Starting a gateway: ``python -m services.gateway [--profile NAME | --serve A,B,...]
[--create-profile]``, or ``hermes gateway run [--serve A,B,...] [--create-profile]``.

One process serves one profile, or (``--serve``) several profiles of one install: a multiplex
gateway, each served profile in its own home, with its own sockets, state file and scope.

The order matters. Every served profile's endpoint lock is taken before anything of the
profile is touched, so a second gateway for a profile already served (by a per-profile
gateway or a multiplex one) exits 73 (``exit_codes.DUPLICATE``), holding none of the locks,
and leaves the first one's files alone. A broken configuration exits 78, which supervisors
are told not to restart; so does a named profile with no home, unless ``--create-profile``
asks for the home to be made first (a container's volume starts empty, and its compose
service names the profile). A multiplex gateway serves what it can rather than nothing: a
listed profile with no home, or whose config or secrets cannot be read, is left out with a
warning, and only when none is left does it exit 78.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fleet.supervisors import detect_supervisor
from services.gateway import profile_scope, sd_notify, storm
from services.gateway.state import GatewayState, restarts_at_start
from shared import exit_codes, homes, ids, logs, stop_grace
from shared.errors import HermesError
from shared.files import StateFileCorrupt, write_json_atomic
from shared.gateways import ops
from shared.identity import current_identity
from shared.layout import GATEWAY_STARTS_FILE
from shared.locks import FileLock, take_or_report
from shared.transport import curve

log = logging.getLogger("services.gateway")


@dataclass
class _Served:
    profile: str
    home: Path
    endpoint: homes.Endpoint
    lock: FileLock | None = None


def run_gateway(profile: str | None = None, *, create: bool = False, serve: str | None = None) -> int:
    """Run the gateway of ``profile`` (default: the profile HERMES_HOME points at), or with
    ``serve`` one process for every profile it names; with ``create``, a named profile with
    no home yet gets one first, as ``hermes profile create`` makes it."""
    logs.configure("gateway")
    # A fatal signal (the watchdog's SIGABRT above all) prints every thread's Python stack to
    # stderr, the journal under systemd: where the loop hung.
    faulthandler.enable()
    sd_notify.starting("reading its profiles")
    try:
        stop_seconds = stop_grace.stop_grace(os.environ)
        root = homes.root_home()
        launch = homes.active_profile()
        if serve is not None:
            wanted = homes.parse_served(serve)
        else:
            wanted = (homes.validate_profile_name(profile) if profile else launch,)
        if create:
            for name in wanted:
                if name != homes.DEFAULT_PROFILE:
                    _create_profile(root, name)
        served = _present(root, wanted, multiplex=serve is not None)
        # A multiplex gateway's records name a profile only inside that profile's activities.
        logs.bind_profile(None if serve is not None else served[0].profile)
        logs.set_activity(profile_scope.log_fields)
    except HermesError as exc:  # a bad profile, run dir, TCP setting, key or stop grace
        print(f"gateway: {exc.message}", file=sys.stderr)
        return exit_codes.CONFIG
    except OSError as exc:  # a profile's home could not be made
        print(f"gateway: cannot create a profile's home: {exc.strerror or exc}", file=sys.stderr)
        return exit_codes.CONFIG
    sd_notify.starting("taking its profiles' locks")
    if not _take_locks(served):
        return exit_codes.DUPLICATE
    try:
        return _serve(root, launch, served, wanted if serve is not None else None, stop_seconds)
    finally:
        for one in served:
            if one.lock is not None:
                one.lock.release()


def preload() -> str | None:
    """Import everything a gateway runs, starting nothing (no thread, no zmq context, no trio
    run): what a fork server does once before it forks gateways. Returns the code sha the
    gateways forked from this interpreter report."""
    import importlib

    importlib.import_module("services.gateway.process")  # the loop, the app, trio and zmq
    from services.gateway.state import IMPORTED_CODE_SHA

    return IMPORTED_CODE_SHA


def _present(root: Path, wanted: tuple[str, ...], *, multiplex: bool) -> list[_Served]:
    """The profiles of ``wanted`` that can be served, each with its endpoint; for a multiplex
    gateway one without a home is left out (a warning), and only none left is an error."""
    served = []
    for name in wanted:
        try:
            home = homes.profile_home(name, root, must_exist=True)
        except homes.ProfileNotFound as exc:
            if not multiplex:
                raise
            log.warning("not serving profile %r: %s", name, exc.message)
            continue
        endpoint = homes.endpoint(home, ops.SERVICE)
        curve.server_options(endpoint)  # a TCP endpoint without its keys never starts
        served.append(_Served(name, home, endpoint))
    if not served:
        raise homes.ProfileNotFound(f"none of the profiles to serve has a home in {root}", detail={"served": wanted})
    return served


def _take_locks(served: list[_Served]) -> bool:
    """Every served profile's endpoint lock, or none of them (the holder of one is named)."""
    for one in served:
        one.lock = take_or_report(
            one.endpoint.lock_path, f"gateway: profile {one.profile!r} already has a running gateway"
        )
        if one.lock is None:
            for taken in served:
                if taken.lock is not None:
                    taken.lock.release()
                    taken.lock = None
            return False
    return True


def _serve(root: Path, launch: str, served: list[_Served], listed: tuple[str, ...] | None, stop_seconds: float) -> int:
    """Serve ``served`` in this process (``listed``: the whole ``--serve`` set of a multiplex
    gateway, the profiles left out at this start included, which a re-exec tries again)."""
    multiplex = listed is not None
    sd_notify.starting("importing its code")
    import trio  # after the checks above: a refused start stays cheap

    from services.gateway.app import Gateway
    from services.gateway.process import GatewayProcess

    sd_notify.starting("reading its profiles' config and secrets")
    scopes = _scopes(launch, served, multiplex=multiplex)
    if scopes is None:
        return exit_codes.CONFIG
    serving = [one for one in served if one.profile in scopes]
    said = ids.describe(root)  # before the loop: it may create the install's id file
    identity, supervisor, instance = current_identity(), detect_supervisor(), ids.instance_id()
    gateways = []
    for one in serving:
        assert one.lock is not None
        state = GatewayState(identity, one.profile, one.home, supervisor, said["install_id"], instance)
        state.restarts = restarts_at_start(one.home, time.time())  # before its first write replaces the file
        gateways.append(Gateway(state, one.endpoint, one.lock, scopes[one.profile]))
    delay = max(_storm_delay(one.home) for one in serving)
    from services.gateway.state import IMPORTED_CODE_SHA

    log.info(
        "starting: serving %s on code %s, supervised by %s",
        ", ".join(one.profile for one in serving),
        (IMPORTED_CODE_SHA or "unknown")[:12],
        supervisor,
    )
    process = GatewayProcess(gateways, multiplex=multiplex, start_delay=delay, stop_seconds=stop_seconds)
    code = trio.run(process.run)
    if process.restart_requested:  # before the locks go: the next start reads the mark
        for gateway in process.gateways:
            _mark_planned(gateway.state.home)
    if process.reexec_requested:
        for one in served:
            if one.lock is not None:
                one.lock.release()
        _reexec(listed or (serving[0].profile,), multiplex=multiplex)
    return code


def _scopes(launch: str, served: list[_Served], *, multiplex: bool) -> dict[str, profile_scope.ProfileScope] | None:
    """Each served profile's scope, read before the loop. The environment the process started
    with is its launch profile's alone: a per-profile gateway's, or in a multiplex gateway the
    profile HERMES_HOME names. A profile whose files cannot be read is left out of a
    multiplex gateway (None when nothing is left) and stops a per-profile one."""
    launch_env = dict(os.environ)
    scopes = {}
    for one in served:
        env = launch_env if not multiplex or one.profile == launch else None
        try:
            scopes[one.profile] = profile_scope.load(one.profile, one.home, launch_env=env)
        except HermesError as exc:
            if not multiplex:
                print(f"gateway: {exc.message}", file=sys.stderr)
                return None
            log.error("not serving profile %r: %s", one.profile, exc.message)
            assert one.lock is not None
            one.lock.release()
            one.lock = None
    if not scopes:
        print("gateway: no profile to serve could be read", file=sys.stderr)
        return None
    return scopes


def _create_profile(root, profile: str) -> None:
    try:
        homes.create_profile(root, profile)
        log.info("created the home of profile %r", profile)
    except FileExistsError:
        pass  # made before, or by a racing creator: used as it is


def _storm_delay(home) -> float:
    path = home / GATEWAY_STARTS_FILE
    try:
        return storm.record_start(path, time.time())
    except StateFileCorrupt as exc:
        log.warning("%s is unreadable (%s); starting its record over", path, exc.reason)
        write_json_atomic(path, {"starts": []})
        return storm.record_start(path, time.time())


def _mark_planned(home) -> None:
    path = home / GATEWAY_STARTS_FILE
    try:
        try:
            storm.record_planned_exit(path, time.time())
        except StateFileCorrupt:
            write_json_atomic(path, {"starts": [], "planned": True})
    except (HermesError, OSError) as exc:  # the restart goes ahead; its start is merely counted
        log.warning("could not mark %s for a planned restart: %s", path, exc)


def _reexec(profiles: tuple[str, ...], *, multiplex: bool) -> None:
    """Become a fresh interpreter running the code now on disk (same pid, so a supervisor
    keeps tracking it). Nothing of the new tree is ever imported into this interpreter."""
    from shared.reexec import reexec_module

    if multiplex:
        reexec_module("services.gateway", "--serve", ",".join(profiles))
    else:
        reexec_module("services.gateway", "--profile", profiles[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.gateway", description="Run one profile's gateway, or several profiles' in one process."
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--profile", metavar="NAME", help="profile to serve (default: the one HERMES_HOME points at)")
    which.add_argument("--serve", metavar="A,B,...", help="profiles of the install to serve from this one process")
    parser.add_argument(
        "--create-profile", action="store_true", help="make a named profile's home first when it has none"
    )
    args = parser.parse_args(argv)
    return run_gateway(args.profile, create=args.create_profile, serve=args.serve)
