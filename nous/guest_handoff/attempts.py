"""Claim attempts and the bounded drain: the only code that sends a guest's claim.

An attempt is reserved in one locked read-modify-write of the records (still due, inside its
window, and bound to the account whose Bearer is about to be sent), the claim goes out with
no lock held, and the answer is recorded in another locked read-modify-write. Two drains, or
a drain and the retry worker, never send the same claim at once: the second finds the
reservation. A 401 refreshes the account's token once and tries again; a claim that carried
the cohort refreshes it afterwards. Everything blocks; async code uses a thread.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nous import portal, refresh, store
from nous.access_token import InvalidAccessToken, read_claims
from nous.guest_handoff import records as records_file
from nous.guest_handoff import rules
from nous.portal_errors import PortalBusy, PortalError, PortalRefused
from shared import homes
from shared.errors import HermesError

# A drain moves apps right after a save, so it is bounded: every record, lock wait, token
# read and request counts against this.
DRAIN_BUDGET = 10.0
CLAIM_PATH = "/api/anonymous/claim"
# Who holds a reservation: this process, and one drain or tick of it.
HOLDER_PREFIX = f"{os.getpid()}"

Clock = Callable[[], float]


@dataclass
class DrainReport:
    attempted: list[str] = field(default_factory=list)  # outcome per attempt, e.g. "claimed", "reserved"
    records: list[dict[str, Any]] = field(default_factory=list)  # public views, newest first

    @property
    def lines(self) -> list[str]:
        return [line for record in self.records for line in record["lines"]]


def drain(root: Path, *, budget: float = DRAIN_BUDGET, clock: Clock = time.time) -> DrainReport:
    """Attempt every due record once, within ``budget`` seconds in all. Never raises."""
    deadline = time.monotonic() + budget
    report = DrainReport()
    try:
        due = [key for key, record in records_file.read_records(root).items() if _due(record, clock())]
    except (HermesError, OSError):
        due = []
    for key in due:
        if time.monotonic() >= deadline:
            break
        report.attempted.append(attempt(root, key, deadline, clock=clock))
    try:
        report.records = records_file.public_records(root)
    except (HermesError, OSError):
        pass
    return report


def _due(record: dict[str, Any], now: float) -> bool:
    return rules.is_due(rules.rearm(record, now=now), now=now)


def attempt(root: Path, key: str, deadline: float, *, clock: Clock = time.time) -> str:
    """One claim attempt for the record ``key``; what came of it. Never raises."""
    try:
        return _attempt(root, key, deadline, clock)
    except (HermesError, OSError) as exc:
        return f"error:{getattr(exc, 'code', type(exc).__name__)}"


def _attempt(root: Path, key: str, deadline: float, clock: Clock) -> str:
    holder = f"{HOLDER_PREFIX}-{secrets.token_hex(4)}"
    reserved = _reserve(root, key, holder, deadline, clock)
    if isinstance(reserved, str):
        return reserved
    record, account = reserved
    home = homes.profile_home(record["profile"], root)
    anon = store.guest_credential(root, home, key)
    if anon is None:
        answer = rules.Answer(status=400, code="invalid_request")  # nothing left to claim with: final
    else:
        answer = _claim(account, anon, deadline)
        if answer.status == 401 and refresh.refresh_account(root, force=True).result == "refreshed":
            account = store.read_account(root) or account
            if _bearer_sub(account) == record["destination"]:
                answer = _claim(account, anon, deadline)
    recorded = _record_answer(root, key, answer, holder, deadline, clock)
    if recorded.get("state") == "claimed" and recorded.get("refresh_token_after"):
        refresh.refresh_account(root, force=True)  # the account now carries the guest's cohort
    return recorded.get("state", "unknown")


def _reserve(
    root: Path, key: str, holder: str, deadline: float, clock: Clock
) -> tuple[dict[str, Any], dict[str, Any]] | str:
    """The reserved record and the account whose Bearer it was reserved for, or why not.

    The account is read under the records' lock: a record parked for want of its account is
    parked before an account write wakes the parked (``records.wake_parked``), or sees it."""
    outcome: list[Any] = ["missing"]

    def change(current: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        record = current.get(key)
        if record is None:
            return current
        account = store.read_account(root)
        now = clock()
        record, reason = rules.reserve(
            rules.rearm(record, now=now), now=now, holder=holder, token_sub=_bearer_sub(account)
        )
        outcome[0] = reason or (record, account)
        return current if record is current[key] else {**current, key: record}

    records_file.change_records(root, change, timeout=_left(deadline))
    return outcome[0]


def _bearer_sub(account: dict[str, Any] | None) -> str | None:
    """Whose Bearer ``account`` would send: None when there is none that may be sent."""
    if account is None or account.get("needs_sign_in"):
        return None
    try:
        return read_claims(account["access_token"]).sub
    except InvalidAccessToken:
        return None


def _record_answer(
    root: Path, key: str, answer: rules.Answer, holder: str, deadline: float, clock: Clock
) -> dict[str, Any]:
    result: list[dict[str, Any]] = [{}]

    def change(current: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        record = current.get(key)
        if record is None:
            return current
        result[0] = rules.record_answer(record, answer, now=clock(), holder=holder)
        return {**current, key: result[0]}

    # The answer must be written even when the budget is spent: give the lock a moment more.
    records_file.change_records(root, change, timeout=max(_left(deadline), 2.0))
    return result[0]


def _claim(account: dict[str, Any], anon: str, deadline: float) -> rules.Answer:
    try:
        tls = portal.tls_context(account.get("ca_bundle"))
        answer = portal.send_blocking(
            account["portal"],
            tls,
            "POST",
            CLAIM_PATH,
            bearer=account["access_token"],
            json={"token": anon},
            timeout=max(_left(deadline), 0.5),
        )
    except PortalRefused as exc:
        return rules.Answer(status=exc.status, code=exc.error)
    except PortalBusy as exc:
        return rules.Answer(status=exc.status, retry_after=exc.retry_after)
    except PortalError:
        return rules.Answer(status=None)  # no usable answer: as good as none
    connectors = answer.get("connectors")
    moved: list[str] | None = None  # no list of names: what moved is unknown, never "nothing"
    if isinstance(connectors, list) and all(isinstance(c, str) for c in connectors):
        moved = list(connectors)
    status = answer.get("status")
    return rules.Answer(
        status=200,
        code=status if isinstance(status, str) else None,
        connectors=moved,
        cohort_carried=answer.get("cohort_carried") is True,
    )


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.05)
