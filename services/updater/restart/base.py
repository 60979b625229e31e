"""What every restart kind shares: the outcome of one gateway's restart, the interface a kind
implements, how long a restart waits, and the restart of a live gateway over its control socket.

A kind (``systemd``, ``launchd``, ``supervisord``, ``gateway_host``, ``unmanaged``) finds its units in an
install and restarts a batch of targets, each target on its own thread so that one gateway's
failure never holds up or fails another, and every target's drain is asked at once: no
gateway waits for a slot while others come back; ``fleet`` chooses each gateway's kind from a
table.

A gateway is restarted over its control socket when no unit of its supervisor's is at hand:
asked to drain (it exits 75 and its supervisor starts the new code: at once, when the kind
asks for the start itself) or, when nothing supervises it, to re-execute itself into the tree
on disk. Either way the restart is done only when a fresh process answers with the expected
code (``freshness``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypedDict, TypeVar

from fleet.discovery import GatewayRecord
from fleet.own_answer import own_status
from fleet.supervisors import Unit
from services.updater.restart.freshness import FRESH, STALE, OldProcess, judge
from shared import homes
from shared.errors import HermesError, failure_reason
from shared.gateways import ops
from shared.protocol import UNANSWERED, RemoteError
from shared.transport import NO_RETRY, SyncSubscriber, connect, subscribe

T = TypeVar("T")


@dataclass(frozen=True)
class RestartOutcome:
    profile: str
    supervisor: str
    old_pid: int  # 0: nothing was running
    new_pid: int | None
    # "drain" (over the control socket; a supervisor starts it again), "signal" (SIGUSR1
    # through the supervisor, when the socket did not answer), "reexec", "start" (nothing
    # was running), "kickstart" or "bootstrap" (launchd), "roll" (every gateway of a gateway
    # host at once, onto its new fork server), or "skip" (left alone: ``reason`` says why)
    method: str
    ok: bool
    reason: str | None = None
    finished: int = 0  # turns that finished during the drain
    cut: int = 0
    accepted: int | None = None  # every turn the drained process took (its drain's word), if drained
    unit: str | None = None  # the supervisor's unit, when a unit module restarted it
    scope: str | None = None  # that unit's manager: "user" or "system"
    fallback: str | None = None  # "blunt": reset and restarted through the supervisor
    budget: float | None = None  # seconds the supervisor's client was given for that restart
    note: str | None = None  # what happened on the way, even when it ended well
    # a unit that failed: its Result, its main process's exit status, and the gateway's last words
    failure: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Waits:
    """How long a restart waits, in seconds."""

    drain: float = 30.0  # for a gateway's turns to finish before it exits
    come_back: float = 60.0  # for a fresh process to come up and answer once the old one left
    poll: float = 0.2  # between two status calls while waiting
    # ... while the gateway's state events are heard: they say when to ask sooner.
    fallback: float = 1.0
    status: float = 2.0  # for one status call
    # A gateway that does not answer a status call this soon is not asked to drain: it is hung.
    probe: float = 5.0


WAITS = Waits()


class Found(NamedTuple):
    """A kind's units in an install."""

    ours: list[Unit]  # the install's: restarted
    foreign: list[Unit]  # named like ours but running another home: named, never touched
    skipped: list[tuple[str, str]]  # (name, why) of what could not be judged or acted on


def nothing_found() -> Found:
    return Found([], [], [])


@dataclass(frozen=True)
class Target:
    """One gateway to restart: its profile, the unit of the kind's that runs it (None: it is
    restarted over its control socket alone), and its live gateway (None: none runs). A
    multiplex gateway is one target, led by one profile's record, with the records of the
    other profiles its process serves as ``siblings``: a kind restarts the lead, and each
    sibling is then verified on its own socket (``multiplex``)."""

    profile: str
    unit: Unit | None = None
    gateway: GatewayRecord | None = None
    siblings: tuple[GatewayRecord, ...] = ()


def unit_targets(units: Iterable[Unit], live: Mapping[str, GatewayRecord]) -> list[Target]:
    """A target per unit, with the gateway that runs now for its profile, if one does."""
    return [Target(unit.profile, unit, live.get(unit.profile)) for unit in units]


class RestartKind(Protocol):
    """One kind of supervisor, as the fleet restart drives it."""

    @property
    def name(self) -> str: ...

    @property
    def waits(self) -> Waits: ...

    def find(self, root: Path) -> Found:
        """This kind's units of the install at ``root``; never raises."""
        ...

    def profile_of(self, name: str) -> str | None:
        """The profile a unit of this kind named ``name`` is for, if it is one."""
        ...

    def restart(self, root: Path, batch: Sequence[Target], expected_sha: str | None) -> list[RestartOutcome]:
        """Restart every target of ``batch`` onto ``expected_sha``: one outcome each, in order;
        what goes wrong with one target is that target's outcome."""
        ...


def each(batch: Sequence[T], restart: Callable[[T], RestartOutcome]) -> list[RestartOutcome]:
    """``restart`` every item of ``batch``, each on its own thread, all at once (a thread spends
    its life waiting on its gateway); the outcomes in order."""
    if not batch:
        return []
    with ThreadPoolExecutor(max_workers=len(batch)) as pool:
        return list(pool.map(restart, batch))


def live_gateways(batch: Sequence[Target]) -> list[GatewayRecord]:
    """The live gateway of every target, for a restart over their sockets; a target without one
    refuses the whole batch before anything is restarted."""
    idle = [target.profile for target in batch if target.gateway is None]
    if idle:
        raise ValueError(f"no running gateway to restart over its control socket: {', '.join(idle)}")
    return [target.gateway for target in batch if target.gateway is not None]


# --- a gateway's control socket -----------------------------------------------------------------


def control_endpoint(home: Path) -> homes.Endpoint:
    return homes.endpoint(home, ops.SERVICE, create=False)


def drain(endpoint: homes.Endpoint, waits: Waits, *, reexec: bool = False) -> dict[str, Any]:
    """Ask the gateway to drain and exit (``reexec``: and re-execute itself); its answer, with the
    turns that ``finished`` and were ``cut``. A refusal or no answer raises RemoteError."""
    op = ops.REEXEC if reexec else ops.DRAIN
    with connect(endpoint, retry=NO_RETRY) as client:
        return client.call(op, {"deadline": waits.drain}, timeout=waits.drain + 10)


class Turns(TypedDict):
    finished: int
    cut: int
    accepted: int | None


def turns(answer: Mapping[str, Any]) -> Turns:
    """How many turns a drain's answer says finished and were cut, and the process took in all
    (None from a gateway that does not say)."""
    return {
        "finished": len(answer.get("finished", [])),
        "cut": len(answer.get("cut", [])),
        "accepted": accepted_turns(answer),
    }


def accepted_turns(answer: Mapping[str, Any]) -> int | None:
    """How many turns an answer says its process took in all; None where it does not say."""
    accepted = answer.get("accepted")
    return accepted if type(accepted) is int and accepted >= 0 else None


def join(*notes: str | None) -> str | None:
    return "; ".join(n for n in notes if n) or None


# --- a live gateway, restarted over its socket alone --------------------------------------------


def failed(gateway: GatewayRecord, method: str, reason: str) -> RestartOutcome:
    return RestartOutcome(gateway.profile, gateway.supervisor, gateway.pid, None, method, False, reason)


def restart_live(
    gateway: GatewayRecord,
    expected_sha: str | None,
    waits: Waits = WAITS,
    *,
    reexec: bool = False,
    gave_up: Callable[[], str | None] | None = None,
    if_hung: Callable[[str], RestartOutcome] | None = None,
    start: Callable[[], str] | None = None,
) -> RestartOutcome:
    """Drain ``gateway`` (``reexec``: have it re-execute itself) and wait for the fresh process.
    ``gave_up`` says why its supervisor will not start it again, once that is so; ``if_hung``
    restarts a gateway that does not answer at all some other way; ``start`` starts the fresh
    process once the drained one has ended, rather than leave it to the supervisor's own
    restart, and says how (the outcome's note; a HermesError: it was not started). Never
    raises: whatever goes wrong with this gateway is its outcome."""
    method = "reexec" if reexec else "drain"
    try:
        return _restart_live(gateway, expected_sha, waits, method, gave_up, if_hung, start)
    except Exception as exc:  # isolation: one gateway's fault must not stop the others
        return failed(gateway, method, failure_reason(exc))


def _restart_live(
    gateway: GatewayRecord,
    expected_sha: str | None,
    waits: Waits,
    method: str,
    gave_up: Callable[[], str | None] | None,
    if_hung: Callable[[str], RestartOutcome] | None,
    start: Callable[[], str] | None,
) -> RestartOutcome:
    address = control_endpoint(gateway.home)
    try:
        with connect(address, retry=NO_RETRY) as client:
            client.call(ops.STATUS, timeout=waits.probe)
    except RemoteError as exc:
        if if_hung is not None and exc.code in UNANSWERED:
            return if_hung(f"its control socket did not answer ({exc.code})")
        return failed(gateway, method, f"its control socket did not answer: {exc.code}: {exc.message}")
    reexec = method == "reexec"
    try:
        answer = drain(address, waits, reexec=reexec)
    except RemoteError as exc:
        return failed(gateway, method, f"{method} was refused: {exc.code}: {exc.message}")
    note: str | None = None
    new_pid: int | None = None
    reason: str | None
    try:
        note = start() if start is not None else None
    except HermesError as exc:
        reason = exc.message
    else:
        new_pid, reason = wait_for_fresh(gateway, address, expected_sha, waits, reexec=reexec, gave_up=gave_up)
    return RestartOutcome(
        profile=gateway.profile,
        supervisor=gateway.supervisor,
        old_pid=gateway.pid,
        new_pid=new_pid,
        method=method,
        ok=reason is None,
        reason=reason,
        note=note,
        **turns(answer),
    )


def wait_for_fresh(
    gateway: GatewayRecord,
    address: homes.Endpoint,
    expected_sha: str | None,
    waits: Waits,
    *,
    reexec: bool,
    gave_up: Callable[[], str | None] | None = None,
) -> tuple[int | None, str | None]:
    """Ask until a fresh process answers as running: (its pid, None), or (its pid, why not)
    when it runs other code; otherwise the reason none did. ``gave_up`` ends the wait early
    once the gateway's supervisor will not start it again. The gateway's state events say when
    to ask again (a process says running, or a new one binds); without them, or when one is
    missed, it asks every ``waits.poll`` (``waits.fallback`` while they are heard)."""
    old = OldProcess(gateway.pid, gateway.start_time)
    deadline = time.monotonic() + waits.come_back
    last: dict[str, Any] | None = None
    with ExitStack() as stack:
        events = _state_events(stack, address)
        while time.monotonic() < deadline:
            why = gave_up() if gave_up is not None and last is None else None
            if why is not None:
                return None, why
            last = own_status(address, waits.status)
            seen = judge(last, old, expected_sha, reexec=reexec)
            if seen.verdict == STALE:
                return seen.pid, f"came back on {str(seen.code_sha)[:12]}, not the new code"
            if seen.verdict == FRESH:
                return seen.pid, None
            left = max(deadline - time.monotonic(), 0.0)
            if events is None:
                time.sleep(min(waits.poll, left))
            else:
                events.wait(min(waits.fallback, left), _says_running)
    if last is None:
        return None, f"no gateway answered within {waits.come_back:g}s of the restart"
    return last.get("pid"), f"still {last.get('state')} on the old process after {waits.come_back:g}s"


def _state_events(stack: ExitStack, address: homes.Endpoint) -> SyncSubscriber | None:
    """The gateway's state events, closed with ``stack``; None when they cannot be had."""
    try:
        return stack.enter_context(subscribe(address, topics=(ops.STATE_TOPIC,)))
    except Exception:  # the events only hasten the wait: without them it asks every Waits.poll
        return None


def _says_running(event: Any) -> bool:
    return isinstance(event, dict) and event.get("state") == ops.RUNNING
