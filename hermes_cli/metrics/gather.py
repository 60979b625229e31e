"""Gathering the install's metrics: one snapshot, the values ``hermes_cli.metrics.families``
renders and ``hermes mesh metrics --json`` prints.

Every gateway is asked at once, each call bounded (``fleet.discovery``'s ``status``, again for
the fields discovery keeps no record of, then ``fleet.health_probe``'s probe turn), so a
gateway that does not answer costs one bound and is ``up`` 0. What the files say (receipts,
obligations, the account) is read as it is; a file that cannot be read is named in
``errors`` and the rest is still given. No token value is read into the snapshot.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fleet import discovery
from fleet.health import UNKNOWN, Health
from fleet.health_probe import probe_health
from hermes_cli.commands.gateway_status import health_window
from nous import store
from shared import homes
from shared.errors import HermesError
from shared.gateways import ops
from shared.version import code_sha

STATUS_TIMEOUT = 1.0  # as ``hermes gateway status`` asks


def gather(root: Path, *, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    errors: list[str] = []
    install_sha = code_sha()
    return {
        "code_sha": install_sha,
        "gateways": _gateways(root, install_sha, errors),
        "updates": _update_outcomes(root, errors),
        "owed": _owed(root, errors),
        "signin": _signin(root, now, errors),
        "errors": errors,
    }


def _gateways(root: Path, install_sha: str | None, errors: list[str]) -> list[dict[str, Any]]:
    from services.updater import verdict

    found = discovery.survey(root, timeout=STATUS_TIMEOUT)
    first: dict[str, discovery.GatewayRecord] = {}
    for seen in found.records:
        first.setdefault(seen.profile, seen)  # the best-informed record comes first
    answering = {name: r.home for name, r in first.items() if r.source == "socket"}
    statuses, _ = discovery.ask_gateways(answering, ops.STATUS, timeout=STATUS_TIMEOUT) if answering else ({}, set())
    window, unread = health_window(root, None)
    if unread:
        errors.append(unread)
    health = probe_health(first.values(), min_healthy=window)
    profiles = list(dict.fromkeys([*homes.list_profiles(root), *(u.profile for u in found.unreached)]))
    gateways = []
    for profile in profiles:
        record = first.get(profile)
        up = record is not None and record.source == "socket"
        sha = record.code_sha if record else None
        answer = statuses.get(profile)
        answer = answer if isinstance(answer, dict) and answer.get("profile") == profile else {}
        told = health.get((profile, record.pid)) if record else None
        gateways.append(
            {
                "profile": profile,
                "up": up,
                "state": record.state if record else "down",
                "pid": record.pid if record else None,
                "code_sha": sha,
                "current_code": up and verdict(sha, install_sha, alive=True) == "current",
                "health": (told or Health(UNKNOWN, "it did not answer on its socket")).to_dict(),
                "active_turns": record.active_turns if record and up else None,
                "turns": answer.get("turns") if up else None,
                "restarts": answer.get("restarts") if up else None,
            }
        )
    return gateways


def _update_outcomes(root: Path, errors: list[str]) -> dict[str, int]:
    from services.updater import ReceiptStore

    try:
        counts, problems = ReceiptStore(root).outcome_counts()
    except (OSError, HermesError) as exc:
        errors.append(f"update receipts: {exc.message if isinstance(exc, HermesError) else exc}")
        return {}
    errors.extend(f"update receipt {p.path}: {p.reason}" for p in problems)
    return counts


def _owed(root: Path, errors: list[str]) -> dict[str, int]:
    from services.updater import owed_counts

    try:
        return owed_counts(root)
    except OSError as exc:
        errors.append(f"obligations: {exc.strerror or exc}")
        return {}


def _signin(root: Path, now: float, errors: list[str]) -> dict[str, Any]:
    said: dict[str, Any] = {"provider": store.PROVIDER, "signed_in": False, "access_expires_in": None}
    try:
        account = store.read_account(root)
    except (OSError, HermesError) as exc:
        errors.append(f"sign-in: {exc.message if isinstance(exc, HermesError) else exc}")
        return said
    if account is None or account.get("needs_sign_in"):
        return said
    expires_at = account.get("expires_at")
    said["signed_in"] = True
    if isinstance(expires_at, (int, float)) and not isinstance(expires_at, bool):
        said["access_expires_in"] = round(expires_at - now, 3)
    return said
