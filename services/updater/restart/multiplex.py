"""A multiplex gateway (one process serving several profiles) is restarted once, through one
of its profiles (the lead), and then every other profile it served (its siblings) is verified
on its own control socket: one outcome per profile, as receipts and ``--json`` expect.

A sibling the fresh process no longer serves (removed from its set, or its home deleted: the
fresh process skips a home that is gone) does not fail the others. A deleted profile is owed
nothing: its outcome is ok and says so. A profile that still exists and that no gateway runs
any more is not ok: it ran a gateway before the update, and leaving it down without a word
would hide that the update took its gateway away; any other gateway answering for it (one
started on its own, say) is a gateway it has, and the verify judges its code as any other's.
"""

from __future__ import annotations

from dataclasses import replace

from fleet.discovery import GatewayRecord
from fleet.own_answer import own_status
from services.updater.restart.base import (
    RestartOutcome,
    Target,
    Waits,
    control_endpoint,
    join,
    wait_for_fresh,
)


def served(outcome: RestartOutcome, target: Target, expected_sha: str | None, waits: Waits) -> list[RestartOutcome]:
    """The outcomes of ``target``'s restart (``outcome``, its lead's) for every profile its
    process served: the lead's first, then each sibling's, verified on its own socket."""
    lead, siblings = target.gateway, target.siblings
    if lead is None or not siblings:
        return [outcome]
    names = ", ".join([lead.profile, *(s.profile for s in siblings)])
    note = f"one process serves {names}: restarted once, through {lead.profile}"
    outcomes = [replace(outcome, note=join(outcome.note, note))]
    if not outcome.ok:
        why = f"served by the process of {lead.profile}: {outcome.reason}"
        return outcomes + [_of(sibling, outcome, ok=False, reason=why, note=note) for sibling in siblings]
    answer = own_status(control_endpoint(lead.home), waits.status)
    fresh_set = answer.get("served_profiles") if answer else None
    for sibling in siblings:
        if not sibling.home.is_dir():
            outcomes.append(_of(sibling, outcome, ok=True, note=f"{note}; its home is gone: nothing is owed"))
        elif isinstance(fresh_set, list) and sibling.profile not in fresh_set:
            outcomes.append(_dropped(sibling, outcome, note, waits))
        else:
            address = control_endpoint(sibling.home)
            reexec = outcome.method == "reexec"
            new_pid, reason = wait_for_fresh(sibling, address, expected_sha, waits, reexec=reexec)
            outcomes.append(_of(sibling, outcome, ok=reason is None, reason=reason, note=note, new_pid=new_pid))
    return outcomes


def _dropped(sibling: GatewayRecord, outcome: RestartOutcome, note: str, waits: Waits) -> RestartOutcome:
    """A sibling the fresh process does not serve: ok while some gateway answers for it."""
    gone = f"{note}; the fresh process no longer serves {sibling.profile}"
    answer = own_status(control_endpoint(sibling.home), waits.status)
    if answer is None:
        return _of(sibling, outcome, ok=False, reason=f"{gone}, and no gateway runs it now", note=note)
    pid = answer.get("pid")
    return _of(sibling, outcome, ok=True, note=f"{gone}; another gateway (pid {pid}) answers for it", new_pid=pid)


def _of(
    sibling: GatewayRecord,
    outcome: RestartOutcome,
    *,
    ok: bool,
    note: str,
    reason: str | None = None,
    new_pid: int | None = None,
) -> RestartOutcome:
    """A sibling's outcome: the process restart's method and unit; its own pids, turns not counted twice."""
    return replace(
        outcome,
        profile=sibling.profile,
        supervisor=sibling.supervisor,
        old_pid=sibling.pid,
        new_pid=new_pid,
        ok=ok,
        reason=reason,
        note=note,
        finished=0,
        cut=0,
    )
