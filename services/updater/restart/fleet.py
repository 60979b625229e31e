"""The fleet restart: every gateway of the install onto the new code, each through its kind.

Restarting only the invoking profile's gateway would leave its siblings on the code they
imported before the update, so the fleet is every live gateway of the install, and every
unit of the install whose gateway is down. Which kind restarts a profile is chosen from
``KINDS`` by one rule: a unit a kind found takes over its profile's gateway only if that
gateway runs under the same kind, or none runs (a profile served by another supervisor is
restarted through that one); a gateway no unit took is restarted by the kind it runs under,
over its control socket (an unknown supervisor counts as none). A unit a kind found but
cannot act on (no privilege for its scope, say) keeps its gateway as it is: draining a gateway
whose supervisor cannot then be driven could leave it down.

A multiplex gateway (one process serving several profiles) is listed by discovery once per
profile it serves; it is restarted once: its records (one process: the same ``instance_id``,
else the same pid and start time) become one target, led by the first in fleet order, and
the kind the process runs under restarts the lead. No unit claims a profile such a process
serves: the process is its gateway. Each sibling profile is then verified on its own socket
(``multiplex``). Naming any served profile in ``only`` restarts the whole process.

A gateway this process descends from (an update started by one of its tools) is restarted
last, once every other one is done: draining it first would wait on the very turn that runs
the update.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from fleet.discovery import GatewayRecord, discover
from fleet.supervisors import Unit
from services.updater.restart.base import (
    Found,
    RestartKind,
    RestartOutcome,
    Target,
    nothing_found,
    unit_targets,
)
from services.updater.restart.gateway_host import GatewayHostKind
from services.updater.restart.launchd import LaunchdKind
from services.updater.restart.multiplex import served
from services.updater.restart.supervisord import SupervisordKind
from services.updater.restart.systemd import SystemdKind
from services.updater.restart.unmanaged import UnmanagedKind
from shared import homes
from shared.gateways import ops
from shared.identity import ancestor_pids

# In the order their units are claimed: the kinds whose units can be listed first.
KINDS: dict[str, RestartKind] = {
    kind.name: kind for kind in (SystemdKind(), LaunchdKind(), SupervisordKind(), GatewayHostKind(), UnmanagedKind())
}
UNMANAGED = UnmanagedKind.name
# A gateway in one of these states is restarted; one stopping or stopped is its supervisor's.
RESTARTED_STATES = frozenset({ops.RUNNING, ops.DRAINING, ops.STARTING})


@dataclass(frozen=True)
class FleetPlan:
    """Who restarts which profile. Each batch is one kind's, keyed by the kind's name."""

    first: dict[str, list[Target]] = field(default_factory=dict)  # all kinds at once
    last: dict[str, list[Target]] = field(default_factory=dict)  # ancestors' gateways, once the first are done
    left: list[RestartOutcome] = field(default_factory=list)  # gateways of units a kind cannot act on


def plan_fleet(
    gateways: Iterable[GatewayRecord],
    found: Mapping[str, Found],
    kinds: Mapping[str, RestartKind],
    *,
    only: Collection[str] | None = None,
    ancestors: Collection[str] = (),
) -> FleetPlan:
    """Which kind restarts each of ``gateways`` (the install's live ones) and of the units each
    kind ``found``, limited to the profiles ``only`` names (all, when None); the profiles in
    ``ancestors`` run a gateway this process descends from. Pure: no I/O."""

    def wanted(profile: str) -> bool:
        return only is None or profile in only

    processes = [
        process for process in _processes(gateways) if any(wanted(g.profile) for g in (process[0], *process[1]))
    ]
    by_profile = {g.profile: g for lead, siblings in processes for g in (lead, *siblings)}
    plan = FleetPlan()
    claimed: set[str] = set()

    def add(kind: str, target: Target) -> None:
        (plan.last if target.profile in ancestors else plan.first).setdefault(kind, []).append(target)

    for name, kind in kinds.items():
        ours, _, skipped = found.get(name, nothing_found())
        units = [
            unit
            for unit in ours
            if wanted(unit.profile) and unit.profile not in claimed and _runs_under(name, by_profile.get(unit.profile))
        ]
        claimed.update(unit.profile for unit in units)
        for target in unit_targets(units, by_profile):
            add(name, target)
        for unit_name, reason in skipped:
            profile = kind.profile_of(unit_name)
            gateway = by_profile.get(profile) if profile else None
            if gateway is not None and gateway.profile not in claimed and _runs_under(name, gateway):
                claimed.add(gateway.profile)
                plan.left.append(
                    RestartOutcome(
                        gateway.profile,
                        name,
                        gateway.pid,
                        gateway.pid,
                        "skip",
                        False,
                        f"{unit_name}: {reason}",
                        unit=unit_name,
                    )
                )
    for lead, siblings in processes:
        if lead.profile not in claimed:
            add(
                lead.supervisor if lead.supervisor in kinds else UNMANAGED,
                Target(lead.profile, gateway=lead, siblings=siblings),
            )
    return plan


def _runs_under(kind: str, gateway: GatewayRecord | None) -> bool:
    """Whether a unit of ``kind`` may take over a profile whose gateway is ``gateway``: a
    multiplex gateway's profile is its process's, never a unit's."""
    return gateway is None or (gateway.supervisor == kind and not gateway.multiplex)


def _processes(gateways: Iterable[GatewayRecord]) -> list[tuple[GatewayRecord, tuple[GatewayRecord, ...]]]:
    """The gateways one per process, in fleet order: each process's first record leads, the
    records of the other profiles a multiplex process serves are its siblings."""
    groups: dict[object, list[GatewayRecord]] = {}
    for gateway in gateways:
        groups.setdefault(_process_key(gateway), []).append(gateway)
    return [(records[0], tuple(records[1:])) for records in groups.values()]


def _process_key(gateway: GatewayRecord) -> object:
    """What tells one process from another: its instance id, else (a multiplex one's) its pid
    and start time. Records that share an instance id are one process even before it says it
    is multiplex: a starting one names only its own profile until every socket answers."""
    if gateway.instance_id:
        return gateway.instance_id
    if gateway.multiplex and gateway.start_time is not None:
        return (gateway.pid, gateway.start_time)
    return ("profile", gateway.profile)  # pids repeat across containers: never grouped by pid alone


def restart_fleet(
    root: Path,
    expected_sha: str | None,
    *,
    only: Collection[str] | None = None,
    kinds: Mapping[str, RestartKind] = KINDS,
) -> list[RestartOutcome]:
    """Restart every gateway of the install at ``root`` (of the profiles ``only`` names, when
    given); a unit whose gateway is down is not started, its outcome says so (a failed one's
    says why). One outcome per profile (a multiplex process's: one per profile it served),
    default profile first."""
    gateways = [g for g in discover(root, scan=False) if g.state in RESTARTED_STATES]
    found = {name: kind.find(root) for name, kind in kinds.items()}
    plan = plan_fleet(gateways, found, kinds, only=only, ancestors=_ancestor_profiles(gateways))
    outcomes = plan.left + _run(root, plan.first, kinds, expected_sha) + _run(root, plan.last, kinds, expected_sha)
    return sorted(outcomes, key=lambda o: (o.profile != homes.DEFAULT_PROFILE, o.profile))


def _run(
    root: Path, batches: Mapping[str, list[Target]], kinds: Mapping[str, RestartKind], expected_sha: str | None
) -> list[RestartOutcome]:
    """Every kind's batch at once, each kind restarting its own targets in parallel, then
    verifying the siblings of each multiplex one."""

    def job(kind: RestartKind, batch: list[Target]) -> list[RestartOutcome]:
        leads = kind.restart(root, batch, expected_sha)
        return [
            o for target, lead in zip(batch, leads, strict=True) for o in served(lead, target, expected_sha, kind.waits)
        ]

    jobs: list[Callable[[], list[RestartOutcome]]] = [
        partial(job, kinds[name], batch) for name, batch in batches.items()
    ]
    if not jobs:
        return []
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        return [outcome for done in pool.map(lambda job: job(), jobs) for outcome in done]


def _ancestor_profiles(gateways: list[GatewayRecord]) -> set[str]:
    """Profiles whose live gateway is an ancestor of this process."""
    ancestors = ancestor_pids()
    return {g.profile for g in gateways if g.pid in ancestors}


def foreign_units(root: Path, kinds: Mapping[str, RestartKind] = KINDS) -> list[tuple[str, Unit]]:
    """(kind, unit) for every unit named like ours that runs another home: named, never touched."""
    return [(name, unit) for name, kind in kinds.items() for unit in kind.find(root).foreign]
