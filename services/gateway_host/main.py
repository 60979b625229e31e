"""``python -m services.gateway_host --profiles a,b,...``: the install's gateway host, on the
root home (its control socket there; one host per install, a second exits 73).

It refuses to start (exit 78) off Linux, where a gateway would not die with its fork server,
and with a profile list it cannot read."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from fleet import hang
from fleet.supervisors.host import PROFILES_FLAG, SERVICE, HangCheckInvalid, require_host
from shared import config, exit_codes, homes, logs
from shared.errors import HermesError
from shared.locks import take_or_report
from shared.transport import curve


def parse_profiles(text: str) -> tuple[str, ...]:
    """The profiles ``--profiles a,b`` names: each valid, none twice, in the order profiles are listed."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        homes.validate_profile_name(text)  # raises: the list names no profile
    return tuple(sorted({homes.validate_profile_name(name) for name in names}, key=homes.profile_order))


def hang_policy(root: Path) -> hang.Policy:
    """The hang check the root's ``config.yaml`` asks for under ``gateway_host:``
    (``health_interval``, 0 for none; ``health_failures``; ``health_start_grace``), the
    defaults for what it leaves out; ``HangCheckInvalid`` naming the key."""
    settings = config.get(config.load_config(root), SERVICE, {})
    where = f"{config.config_path(root)} key {SERVICE}"
    if not isinstance(settings, dict):
        raise HangCheckInvalid(f"{where}: a mapping, not {type(settings).__name__}", detail={"field": SERVICE})
    interval = _setting(settings, "health_interval", hang.INTERVAL, where)
    failures = _setting(settings, "health_failures", hang.FAILURES, where)
    start_grace = _setting(settings, "health_start_grace", hang.START_GRACE, where)
    if failures != int(failures) or not 1 <= failures <= hang.MAX_FAILURES:
        raise HangCheckInvalid(
            f"{where}.health_failures: a whole number from 1 to {hang.MAX_FAILURES}, not {failures!r}",
            detail={"field": "health_failures"},
        )
    return hang.Policy(interval, int(failures), start_grace)


def _setting(settings: dict[str, Any], key: str, default: float, where: str) -> float:
    value = settings.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= hang.MAX_SECONDS:
        raise HangCheckInvalid(  # NaN fails the range too
            f"{where}.{key}: a number of seconds from 0 to {hang.MAX_SECONDS:g}, not {str(value)[:40]!r}",
            detail={"field": key},
        )
    return float(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.gateway_host", description="Run the install's gateways from one fork server."
    )
    parser.add_argument(PROFILES_FLAG, required=True, metavar="A,B,...", help="profiles to run a gateway each for")
    args = parser.parse_args(argv)
    try:
        require_host()
        profiles = parse_profiles(args.profiles)
        root = homes.root_home()
        endpoint = homes.endpoint(root, SERVICE)
        curve.server_options(endpoint)  # a TCP endpoint without its keys never starts
        policy = hang_policy(root)
    except HermesError as exc:
        print(f"{SERVICE}: {exc.message}", file=sys.stderr)
        return exit_codes.CONFIG
    logs.configure(SERVICE)
    lock = take_or_report(endpoint.lock_path, f"{SERVICE}: this install already has a gateway host")
    if lock is None:
        return exit_codes.DUPLICATE
    import trio  # once the lock is held: a refused start stays cheap

    from services.gateway_host.host import GatewayHost

    host = GatewayHost(root, endpoint, lock, profiles, policy)
    try:
        return trio.run(host.run)
    finally:
        lock.release()
