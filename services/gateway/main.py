"""Starting a gateway: ``python -m services.gateway [--profile NAME] [--create-profile]`` or
``hermes gateway run [--create-profile]``.

The order matters. The endpoint lock is taken before anything of the profile is touched,
so a second gateway for the same profile exits 73 (``exit_codes.DUPLICATE``) and leaves the first one's files
alone. A broken configuration exits 78, which supervisors are told not to restart; so does a
named profile with no home, unless ``--create-profile`` asks for the home to be made first
(a container's volume starts empty, and its compose service names the profile).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from services.gateway import storm
from services.gateway.state import GatewayState
from shared import curve, exit_codes, homes, ids, logs
from shared.errors import HermesError
from shared.files import StateFileCorrupt, write_json_atomic
from shared.gateways import ops
from shared.identity import current_identity
from shared.layout import GATEWAY_STARTS_FILE
from shared.locks import take_or_report
from shared.supervisors import detect_supervisor

log = logging.getLogger("services.gateway")


def run_gateway(profile: str | None = None, *, create: bool = False) -> int:
    """Run the gateway of ``profile`` (default: the profile HERMES_HOME points at); with
    ``create``, a named profile with no home yet gets one first, as ``hermes profile create``
    makes it (an existing one is simply used)."""
    logs.configure("gateway")
    try:
        root = homes.root_home()
        profile = homes.validate_profile_name(profile) if profile else homes.active_profile()
        if create and profile != homes.DEFAULT_PROFILE:
            _create_profile(root, profile)
        home = homes.profile_home(profile, root, must_exist=True)
        endpoint = homes.endpoint(home, ops.SERVICE)
        curve.server_options(endpoint)  # a TCP endpoint without its keys never starts
    except HermesError as exc:  # a bad profile, run dir, TCP setting or key
        print(f"gateway: {exc.message}", file=sys.stderr)
        return exit_codes.CONFIG
    except OSError as exc:  # the profile's home could not be made
        print(f"gateway: cannot create the home of profile {profile!r}: {exc.strerror or exc}", file=sys.stderr)
        return exit_codes.CONFIG
    lock = take_or_report(endpoint.lock_path, f"gateway: profile {profile!r} already has a running gateway")
    if lock is None:
        return exit_codes.DUPLICATE

    import trio  # after the checks above: a refused start stays cheap

    from services.gateway.app import Gateway

    try:
        said = ids.describe(root)  # before the loop: it may create the install's id file
        state = GatewayState(
            current_identity(), profile, home, detect_supervisor(), said["install_id"], ids.instance_id()
        )
        gateway = Gateway(state, endpoint, lock, start_delay=_storm_delay(home))
        code = trio.run(gateway.run)
        if gateway.state.restart_requested:  # before the lock goes: the next start reads the mark
            _mark_planned(home)
    finally:
        lock.release()
    if gateway.reexec_requested:
        _reexec(profile)
    return code


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


def _reexec(profile: str) -> None:
    """Become a fresh interpreter running the code now on disk (same pid, so a supervisor
    keeps tracking it). Nothing of the new tree is ever imported into this interpreter."""
    from shared.reexec import reexec_module

    reexec_module("services.gateway", "--profile", profile)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.gateway", description="Run one profile's gateway.")
    parser.add_argument("--profile", metavar="NAME", help="profile to serve (default: the one HERMES_HOME points at)")
    parser.add_argument(
        "--create-profile", action="store_true", help="make the named profile's home first when it has none"
    )
    args = parser.parse_args(argv)
    return run_gateway(args.profile, create=args.create_profile)
