"""The install's metrics: their stable names, and the families a gathered snapshot
(``hermes_cli.metrics.gather``) renders to. No I/O. ``docs/gateways.md`` lists the names (``render_table``); a name
never changes meaning, a new one is added instead.

Per gateway (label ``profile``): ``up`` says it answered ``status`` on its socket; one that did
not answers nothing else here, so only ``up``, ``current_code`` and ``healthy`` (each 0) are
given for it. ``healthy`` is 1 only for a gateway ``fleet.health`` calls healthy: 0 is
unhealthy or not known yet (``--json`` says which, and why).

``hermes_updates_total`` counts the updates that ended, by outcome: the receipts the updater
keeps and the tally it adds each one to as it prunes it, so it only grows.

Sign-in: ``hermes_signin_signed_in`` is 1 while the install holds an account that needs no new
sign-in; ``hermes_signin_access_expiry_seconds`` (only then) is the time left on its access
token, negative once it lapsed unrefreshed. No token's value is ever read into a snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hermes_cli.metrics.exposition import Family, Sample, histogram

PREFIX = "hermes_"
GATEWAY_UP = "hermes_gateway_up"
GATEWAY_CURRENT = "hermes_gateway_current_code"
GATEWAY_HEALTHY = "hermes_gateway_healthy"
ACTIVE_TURNS = "hermes_gateway_active_turns"
TURN_DURATION = "hermes_gateway_turn_duration_seconds"
LAST_TURN = "hermes_gateway_last_turn_seconds"
RESTARTS = "hermes_gateway_restarts"  # a counter: its sample is ``hermes_gateway_restarts_total``
RESTARTS_LAST_HOUR = "hermes_gateway_restarts_last_hour"
UPDATES = "hermes_updates"  # a counter: its sample is ``hermes_updates_total``
OWED = "hermes_owed_obligations"
SIGNED_IN = "hermes_signin_signed_in"
ACCESS_EXPIRY = "hermes_signin_access_expiry_seconds"

# name -> (type, unit, help): the table docs/gateways.md shows.
METRICS: dict[str, tuple[str, str, str]] = {
    GATEWAY_UP: ("gauge", "", "1 when the profile's gateway answered status on its socket, else 0"),
    GATEWAY_CURRENT: ("gauge", "", "1 when the gateway runs the install's commit, else 0"),
    GATEWAY_HEALTHY: ("gauge", "", "1 when the gateway's probe turn judged it healthy, else 0 (unhealthy or unknown)"),
    ACTIVE_TURNS: ("gauge", "", "agent turns the gateway has in flight"),
    TURN_DURATION: ("histogram", "seconds", "wall time of each agent turn that finished, since the process started"),
    LAST_TURN: ("gauge", "seconds", "wall time of the latest agent turn that finished"),
    RESTARTS: ("counter", "", "starts of the profile's gateway that had a predecessor, whatever the supervisor"),
    RESTARTS_LAST_HOUR: ("gauge", "", "restarts of the profile's gateway in the last hour"),
    UPDATES: ("counter", "", "updates that ended, by outcome (a pruned receipt still counts)"),
    OWED: ("gauge", "", "what committed updates still owe, by kind (fleet_restart: gateways owed a restart)"),
    SIGNED_IN: ("gauge", "", "1 while the install holds a Nous account that needs no new sign-in, else 0"),
    ACCESS_EXPIRY: ("gauge", "seconds", "seconds until the Nous access token expires (absent when not signed in)"),
}


def _family(name: str, samples: list[Sample]) -> Family:
    kind, unit, text = METRICS[name]
    return Family(name, kind, text, tuple(samples), unit)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def families(snapshot: Mapping[str, Any]) -> list[Family]:
    """The metric families of a snapshot as ``gather.gather`` makes it (its ``--json``)."""
    by: dict[str, list[Sample]] = {name: [] for name in METRICS}
    for g in snapshot["gateways"]:
        who = {"profile": g["profile"]}
        by[GATEWAY_UP].append(Sample("", who, int(g["up"])))
        by[GATEWAY_CURRENT].append(Sample("", who, int(g["current_code"])))
        by[GATEWAY_HEALTHY].append(Sample("", who, int(g["health"]["state"] == "healthy")))
        if not g["up"]:
            continue
        if _number(g.get("active_turns")):
            by[ACTIVE_TURNS].append(Sample("", who, g["active_turns"]))
        turns = g.get("turns")
        if isinstance(turns, dict):
            latency = turns.get("latency")
            if isinstance(latency, dict):
                by[TURN_DURATION].extend(
                    histogram(who, latency.get("le") or (), latency.get("counts") or (), latency.get("sum")) or ()
                )
            if _number(turns.get("last_seconds")):
                by[LAST_TURN].append(Sample("", who, turns["last_seconds"]))
        restarts = g.get("restarts")
        if isinstance(restarts, dict):
            if type(restarts.get("total")) is int and restarts["total"] >= 0:
                by[RESTARTS].append(Sample("_total", who, restarts["total"]))
            if type(restarts.get("last_hour")) is int:
                by[RESTARTS_LAST_HOUR].append(Sample("", who, restarts["last_hour"]))
    for outcome, count in snapshot["updates"].items():
        by[UPDATES].append(Sample("_total", {"outcome": outcome}, count))
    for kind, count in snapshot["owed"].items():
        by[OWED].append(Sample("", {"kind": kind}, count))
    signin = snapshot["signin"]
    provider = {"provider": signin["provider"]}
    by[SIGNED_IN].append(Sample("", provider, int(signin["signed_in"])))
    if signin["signed_in"] and _number(signin.get("access_expires_in")):
        by[ACCESS_EXPIRY].append(Sample("", provider, signin["access_expires_in"]))
    return [_family(name, samples) for name, samples in by.items()]


def render_table() -> str:
    """The metric names, types and meanings, as docs/gateways.md shows them."""
    width = max(len(name) for name in METRICS) + 2
    rows = []
    for name, (kind, _, text) in METRICS.items():
        sample = f"{name}_total" if kind == "counter" else name
        rows.append(f"{sample:<{width}}{kind:<11}{text}")
    return "\n".join(rows) + "\n"
