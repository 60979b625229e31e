"""The update-fleet benchmark's load: clients sending turns to every gateway through an
update, and the accounting of what happened to each turn (see ``update_fleet``'s docstring)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psutil
import trio

from bench.fleet_install import WARM_UP_TIMEOUT, FleetInstall
from shared.gateways import ops
from shared.protocol import Code, RemoteError
from shared.transport.call_rules import NO_RETRY
from tests.support.async_client import open_client
from tests.support.subscriber import open_subscriber

NOT_ACCEPTED = frozenset({ops.DRAINING, Code.SHUTTING_DOWN, Code.BUSY, Code.UNAVAILABLE})


NO_ANSWER = frozenset({Code.TIMEOUT, Code.CONNECTION_RESET})


TURN_CUT = "turn_cut"


RETRY_PAUSE = 0.05  # before a refused turn is sent again


TURN_TIMEOUT = 10.0  # per attempt: far past any drain and restart here, so a timeout means no answer
EXIT_POLL = 0.01  # how often the old gateway processes are looked at during the update


def epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


@dataclass
class Numbered:
    """A completed turn or a ``turn_cut`` answer: a number its gateway process gave out."""

    profile: str
    turn_id: int
    started_at: float | None  # the gateway's clock (epoch s); None for a cut turn
    answered: float  # epoch s


@dataclass
class Unanswered:
    profile: str
    tag: str
    code: str
    sent: float  # epoch s


@dataclass
class Tally:
    completed: int = 0
    retried: Counter = field(default_factory=Counter)  # refusal code -> attempts sent again
    lost_answers: Counter = field(default_factory=Counter)  # turn_cut, deadline_exceeded, wrong_echo ...
    examples: list[str] = field(default_factory=list)
    unanswered: list[Unanswered] = field(default_factory=list)
    abandoned: int = 0  # turns still refused when the load stopped: never accepted, not retried further
    numbered: list[Numbered] = field(default_factory=list)
    first_refusal: dict[str, float] = field(default_factory=dict)  # profile -> epoch s
    draining_event: dict[str, float] = field(default_factory=dict)  # profile -> epoch s

    def drain_seen(self, profile: str) -> float | None:
        """When this profile's gateway was first seen draining: its ``draining`` broadcast or
        a refusal, whichever came first. The gateway sets its draining flag before either
        leaves it, so no turn sent after this moment can be accepted by that process."""
        seen = [at for at in (self.first_refusal.get(profile), self.draining_event.get(profile)) if at is not None]
        return min(seen, default=None)

    def lose(self, code: str, example: str) -> None:
        self.lost_answers[code] += 1
        if len(self.examples) < 5:
            self.examples.append(example)


class Load:
    def __init__(self, install: FleetInstall, profiles: list[str], clients: int, turn_seconds: float):
        self.install = install
        self.profiles = profiles
        self.clients = clients
        self.turn_seconds = turn_seconds
        self.tally = Tally()
        self.stopping = False
        self.finished = trio.Event()
        self.exits: dict[str, float] = {}  # profile -> when its old process ended (epoch s)

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                for profile in self.profiles:
                    address = self.install.address(profile)
                    for n in range(self.clients):
                        nursery.start_soon(self._client, profile, address, n)
        finally:
            self.finished.set()

    async def watch_states(self) -> None:
        """Each gateway's ``state`` broadcasts (lossy: a missed one only weakens the proof
        that an unanswered turn was never accepted). The subscription reconnects to the new
        process by itself."""
        async with trio.open_nursery() as nursery:
            for profile in self.profiles:
                nursery.start_soon(self._watch_state, profile)

    async def _watch_state(self, profile: str) -> None:
        async with open_subscriber(self.install.events(profile), ["state"]) as events:
            async for event in events:
                if isinstance(event.event, dict) and event.event.get("state") == ops.DRAINING:
                    self.tally.draining_event.setdefault(profile, time.time())

    async def _client(self, profile: str, address: str, n: int) -> None:
        tally = self.tally
        seq = 0
        async with open_client(address, retry=NO_RETRY) as client:
            while not self.stopping:
                seq += 1
                tag = f"{profile}/{n}/{seq}"
                while True:  # the same turn until an answer other than a refusal
                    sent = time.time()
                    try:
                        result = await client.call(
                            ops.TURN, {"text": tag, "seconds": self.turn_seconds}, timeout=TURN_TIMEOUT
                        )
                    except RemoteError as exc:
                        if exc.code in NOT_ACCEPTED:
                            tally.retried[exc.code] += 1
                            tally.first_refusal.setdefault(profile, time.time())
                            if self.stopping:
                                tally.abandoned += 1
                                return
                            await trio.sleep(RETRY_PAUSE)
                            continue
                        if exc.code in NO_ANSWER:
                            tally.unanswered.append(Unanswered(profile, tag, exc.code, sent))
                            break
                        tally.lose(exc.code, f"{tag}: {exc.code}: {exc.message}")
                        cut = (exc.detail or {}).get("turn_id") if exc.code == TURN_CUT else None
                        if isinstance(cut, str) and cut[1:].isdigit():
                            tally.numbered.append(Numbered(profile, int(cut[1:]), None, time.time()))
                        break
                    if not isinstance(result, dict) or result.get("text") != tag:
                        tally.lose("wrong_echo", f"{tag}: answered {result!r:.200}")
                        break
                    tally.completed += 1
                    tally.numbered.append(
                        Numbered(profile, int(result["turn_id"][1:]), epoch(result["started_at"]), time.time())
                    )
                    break

    async def warm_up(self) -> None:
        with trio.fail_after(WARM_UP_TIMEOUT):
            while {n.profile for n in self.tally.numbered} != set(self.profiles):
                await trio.sleep(0.05)

    async def watch_exits(self, pids: dict[str, int]) -> None:
        """When each old gateway process ended (a zombie counts: supervisord has not reaped it yet)."""
        waiting = dict(pids)
        while waiting and not self.stopping:
            for profile, pid in list(waiting.items()):
                try:
                    gone = psutil.Process(pid).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
                except psutil.NoSuchProcess:
                    gone = True
                if gone:
                    self.exits[profile] = time.time()
                    del waiting[profile]
            await trio.sleep(EXIT_POLL)


def account(
    tally: Tally, processes: dict[str, list[float]], accepted: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """Every number each gateway process gave out must have reached a caller.

    ``processes``: per profile, the start (epoch s) of each gateway process seen, oldest
    first. A completed turn belongs to the last process started before the turn did; a
    ``turn_cut`` answer to the last process started before the answer (an old process answers
    its cut turns before it exits, and its successor cannot start until it has). Numbers
    missing from a process's sequence are turns it accepted whose answer never arrived.

    An unanswered call sent after its gateway was seen draining cannot have been accepted by
    the old process (a drain never ends: it refuses every later turn); only a newer process
    could have taken it, and if that process's numbers have no gap, it did not. Such calls are
    dropped requests, not lost turns. ``accepted``, per key, is how many turns the old process
    took in all (its drain's answer; it takes none after): when every one of its numbers up to
    that count reached a caller, an unanswered call was not one of them, whenever it was sent.
    Any other unanswered call may have been accepted: lost.
    """
    accepted = accepted or {}
    gaps: dict[str, list[str]] = {}
    counts: dict[str, list[int]] = {}
    all_answered: set[str] = set()  # keys whose old process's every accepted turn was answered
    for profile, starts in processes.items():
        ids: list[set[int]] = [set() for _ in starts]
        for turn in (t for t in tally.numbered if t.profile == profile):
            at = turn.started_at if turn.started_at is not None else turn.answered
            index = max([i for i, s in enumerate(starts) if s <= at] or [0])
            ids[index].add(turn.turn_id)
        counts[profile] = [len(seen) for seen in ids]
        for index, seen in enumerate(ids):
            missing = sorted(set(range(1, max(seen, default=0) + 1)) - seen)
            gaps.setdefault(profile, []).extend(f"process {index + 1} t{m}" for m in missing)
        if profile in accepted and ids[0] == set(range(1, accepted[profile] + 1)):
            all_answered.add(profile)
    dropped: list[Unanswered] = []
    unproven: Counter = Counter()
    for call in tally.unanswered:
        refused = tally.drain_seen(call.profile)
        newer_gaps = [g for g in gaps.get(call.profile, []) if not g.startswith("process 1 ")]
        before_drain_seen = refused is None or call.sent < refused
        if not newer_gaps and (not before_drain_seen or call.profile in all_answered):
            dropped.append(call)
        else:
            unproven[call.profile] += 1
    # An accepted turn whose answer was lost is both a gap and an unanswered call: count it once.
    lost = sum(tally.lost_answers.values()) + sum(
        max(len(gaps.get(p, [])), unproven[p]) for p in set(gaps) | set(unproven)
    )
    return {
        "lost": lost,
        "gaps": {p: g for p, g in gaps.items() if g},
        "unanswered_unproven": sum(unproven.values()),
        "dropped": dropped,
        "turns_per_process": counts,
    }
