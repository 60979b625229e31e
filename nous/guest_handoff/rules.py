"""The guest handoff's rules: records and a clock in, decisions out.

A record (built by ``new_record``) is a JSON-able dict that someone else persists. Every function
here takes records and ``now`` (unix seconds) and returns new records; it never changes the one it
was given, and returns that very object when nothing changes, so a caller can skip the write.
The caller reserves an attempt inside one locked read-modify-write, sends the claim outside every
lock, then records the answer inside another. A record that cannot be sent until the account
changes (another account's Bearer, or none) is parked: never due until its window ends, and woken
(``wake``) by the account write that brings its account back. No I/O here: the whole 13-day window
is tested on a fake clock.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from nous.errors import NousError

# 2: records can be parked. An older record loads as it is: it simply has never been parked.
RULES_VERSION = 2
# Attempts stop 13 days after the record was made: the service reaps an idle guest identity,
# apps included, after 14.
WINDOW = 13 * 86400.0
# A reservation's lifetime: an attempt whose holder died before the answer is due again after it.
LEASE = 60.0
# Seconds to wait after the n-th failed attempt; the slowest rung repeats.
LADDER = (30, 120, 600, 3600, 6 * 3600, 24 * 3600)
# Refusals no later attempt can change. Every other refusal, unknown codes included, retries.
FINAL_CODES = frozenset({"client_not_allowed", "account_locked", "invalid_request"})

# States whose outcome is known: no attempt is made for them (``reserve`` says "settled").
SETTLED = frozenset({"claimed", "gone", "failed", "expired"})
# Why a record is parked: the install's account is another one, or there is none usable.
WRONG_ACCOUNT = "wrong_account"
NO_ACCOUNT = "no_account"
_KEY = re.compile(r"[0-9a-f]{64}\Z")


class BadHandoffInput(NousError, ValueError):
    """A credential, key or binding the rules refuse to record (the message never quotes it)."""

    code = "handoff_bad_input"


@dataclass(frozen=True)
class Answer:
    """One claim attempt's outcome, as the caller read it off the wire."""

    status: int | None  # None: the request failed in transport, no answer at all
    code: str | None = None  # the JSON ``error``; for a 200, its ``status`` field
    connectors: list[str] | None = None  # None: the answer had no connectors list (unknown)
    cohort_carried: bool = False
    retry_after: float = 0.0  # seconds; 0 when the answer set none


def record_key(anon: str) -> str:
    """The record's key for the guest credential ``anon``: a hash, so files never hold it."""
    if not isinstance(anon, str) or not anon.startswith("anon_") or anon == "anon_":
        raise BadHandoffInput("not a guest credential")
    return hashlib.sha256(anon.encode()).hexdigest()


def new_record(*, key: str, profile: str, destination: str, email: str, now: float) -> dict[str, Any]:
    """A pending handoff of the guest identity ``key`` to the account ``destination``, due now."""
    if not isinstance(key, str) or not _KEY.match(key):
        # A key that is not a hash may be the credential itself, which must never reach a file.
        raise BadHandoffInput("a handoff key must be record_key()'s hash")
    if not profile or not destination:
        raise BadHandoffInput("a handoff needs a profile and a destination account")
    record = {
        "key": key,
        "profile": profile,
        "destination": destination,
        "email": email,
        "state": "pending",
        "created_at": now,
        "attempts": 0,
        "next_attempt_at": now,
        "reserved_until": None,
        "reserved_by": None,
        "parked_reason": None,
        "last_code": None,
        "connectors": None,
        "probably_moved": False,
        "refresh_token_after": False,
    }
    return _decide(record, now)


def note_replacement(
    records: dict[str, dict[str, Any]], *, key: str, profile: str, destination: str, email: str, now: float
) -> dict[str, dict[str, Any]]:
    """``records`` after an account (``destination``) was saved over the guest identity ``key``."""
    out = dict(records)
    current = records.get(key)
    if current is None:
        out[key] = new_record(key=key, profile=profile, destination=destination, email=email, now=now)
    elif current["state"] not in ("claimed", "gone") and current["destination"] != destination:
        # The apps go to whoever signed in last, never to two: the new binding starts its ladder
        # afresh, but the window is the guest identity's life, which a sign-in does not extend.
        fresh = new_record(key=key, profile=profile, destination=destination, email=email, now=now)
        out[key] = {**fresh, "created_at": current["created_at"]}
    return out


def rename_profile(records: dict[str, dict[str, Any]], *, old: str, new: str) -> dict[str, dict[str, Any]]:
    """``records`` with every handoff owed to profile ``old`` owed to ``new``, its renamed self;
    the very records given when none names ``old``."""
    if not any(record.get("profile") == old for record in records.values()):
        return records
    return {key: {**r, "profile": new} if r.get("profile") == old else r for key, r in records.items()}


def rearm(record: dict[str, Any], *, now: float) -> dict[str, Any]:
    """``record`` made pending again where an earlier run left it stuck; otherwise ``record``."""
    state = record["state"]
    if state == "reserved" and _lease_lapsed(record, now):
        # The holder died between reservation and answer; its attempt stays counted.
        return _decide(record, now, state="pending", next_attempt_at=now, reserved_until=None, reserved_by=None)
    if (
        state == "failed"
        and record.get("rules_version", 0) < RULES_VERSION
        and record["last_code"] not in FINAL_CODES
        and now <= _window_end(record)
    ):
        # An older build gave up on a code a later attempt can change.
        return _decide(record, now, state="pending", next_attempt_at=now)
    return record


def due_at(record: dict[str, Any]) -> float | None:
    """When ``record`` is next due (unix seconds; a reservation when its lease ends, a parked
    record when its window ends, to expire it), or None when nothing will ever run for it again."""
    if record["state"] == "reserved":
        return record["reserved_until"] or 0.0
    if record["state"] == "pending":
        return record["next_attempt_at"]
    if record["state"] == "parked":
        return _window_end(record)
    return None


def is_due(record: dict[str, Any], *, now: float) -> bool:
    """Whether an attempt (or, past the window, the expiry) should run for ``record`` now."""
    at = due_at(record)
    return at is not None and now >= at


def reserve(
    record: dict[str, Any], *, now: float, holder: str, token_sub: str | None
) -> tuple[dict[str, Any], str | None]:
    """Reserve one attempt for ``holder``, about to send a Bearer whose ``sub`` is ``token_sub``
    (None: the install has no account whose Bearer may be sent).

    ``(reserved record, None)``, or ``(record, reason)`` when nothing may be sent; a record that
    must wait for its account comes back parked. Run it inside the records' locked
    read-modify-write, and persist what it returns before sending.
    """
    state = record["state"]
    if state in SETTLED:
        return record, "settled"
    if state == "reserved" and not _lease_lapsed(record, now):
        return record, "reserved"
    # A parked record has nothing to send at its window's end: that is when it expires.
    if now > _window_end(record) or (state == "parked" and now >= _window_end(record)):
        return _decide(record, now, state="expired", reserved_until=None, reserved_by=None), "window_closed"
    fits = bool(token_sub) and token_sub == record["destination"]
    if state == "parked" and not fits:
        return record, "parked"
    if state != "parked" and not is_due(record, now=now):
        return record, "not_due"
    if not fits:
        # That Bearer belongs to another account (a claim with it would move the apps there), or
        # there is none: asking again before the account changes would only get the same answer.
        reason = NO_ACCOUNT if not token_sub else WRONG_ACCOUNT
        return _decide(record, now, state="parked", parked_reason=reason, reserved_until=None, reserved_by=None), reason
    # Counted as sent from here on: once the request leaves, it may land even if no answer does.
    reserved = _decide(
        record,
        now,
        state="reserved",
        attempts=record["attempts"] + 1,
        reserved_until=now + LEASE,
        reserved_by=holder,
    )
    return reserved, None


def wake(records: dict[str, dict[str, Any]], *, sub: str | None, now: float) -> dict[str, dict[str, Any]]:
    """``records`` after an account write that leaves ``sub`` the install's usable account (None:
    none is): the records parked for that account are due now. ``records`` itself when none is."""
    woken = {
        key: _decide(record, now, state="pending", next_attempt_at=now, parked_reason=None)
        for key, record in records.items()
        if sub and record["state"] == "parked" and record["destination"] == sub
    }
    return {**records, **woken} if woken else records


def record_answer(record: dict[str, Any], answer: Answer, *, now: float, holder: str | None = None) -> dict[str, Any]:
    """``record`` after the answer to the attempt ``holder`` (any holder when None) reserved."""
    if record["state"] != "reserved" or (holder is not None and record["reserved_by"] != holder):
        # A late answer: the record got its outcome, was re-bound or re-reserved meanwhile (so a claimed
        # record is never reopened). Dropping it is safe: a success lost this way reads as
        # "probably moved" on the next attempt.
        return record
    done = {"last_code": _last_code(answer), "reserved_until": None, "reserved_by": None}
    if answer.status == 200 and answer.code == "claimed":
        connectors = None if answer.connectors is None else list(answer.connectors)
        return _decide(
            record,
            now,
            **done,
            state="claimed",
            connectors=connectors,
            probably_moved=False,
            refresh_token_after=answer.cohort_carried,
        )
    if _refusal(answer.status):
        if answer.code == "unknown_token":
            # This attempt counts, so attempts > 1 means an earlier one may have moved the apps
            # and lost its answer.
            return _decide(record, now, **done, state="gone", probably_moved=record["attempts"] > 1)
        if answer.code == "already_retired":
            return _decide(record, now, **done, state="gone", probably_moved=True)
        if answer.code in FINAL_CODES:
            return _decide(record, now, **done, state="failed")
    rung = LADDER[min(max(record["attempts"] - 1, 0), len(LADDER) - 1)]
    due = now + max(rung, answer.retry_after)
    if due > _window_end(record):
        return _decide(record, now, **done, state="expired")
    return _decide(record, now, **done, state="pending", next_attempt_at=due)


def copy_lines(record: dict[str, Any]) -> list[str]:
    """What the user reads about ``record``: never a server code, a URL or a command."""
    email = record["email"] or "your new account"
    state = record["state"]
    if state == "claimed":
        connectors = record["connectors"]
        if connectors is None:
            return [f"Your guest apps were moved to {email}."]
        if not connectors:
            return ["Your guest session had no connected apps to move."]
        return [f"Moved your guest apps to {email}: {', '.join(connectors)}."]
    if state == "gone":
        if record["probably_moved"]:
            return [f"Your guest apps were probably already moved to {email}."]
        return ["Your guest session had expired; there were no apps left to move."]
    if state == "failed":
        return [f"Your guest apps could not be moved to {email}. Reconnect them from the new account."]
    if state == "expired":
        days = int(WINDOW // 86400)
        return [f"Moving your guest apps gave up after {days} days. Reconnect them from the new account."]
    if state == "parked":
        if not record["email"]:
            return ["Moving your guest apps waits until the account they go to is signed in here again."]
        return [f"Moving your guest apps to {email} waits until {email} is signed in here again."]
    # Pending or reserved: has an attempt already come back without moving them?
    answered = record["attempts"] - (1 if state == "reserved" else 0)
    if answered > 0:
        return [f"Moving your guest apps to {email} is taking longer than usual; it will keep trying."]
    return [f"Moving your guest apps to {email}…"]


_PUBLIC = (
    "state",
    "email",
    "connectors",
    "probably_moved",
    "attempts",
    "created_at",
    "updated_at",
    "next_attempt_at",
    "lines",
)


def sign_in_lines(view: dict[str, Any]) -> list[str]:
    """What a sign-in reports of the record ``view`` once its wait for an attempt held elsewhere
    is over: a move still under way says where its outcome will show (never a command)."""
    if view["state"] != "reserved":
        return list(view["lines"])
    email = view["email"] or "your new account"
    return [f"Moving your guest apps to {email} is still under way; this install's Nous status will show the result."]


def public_view(record: dict[str, Any]) -> dict[str, Any]:
    """The fields a status display may show: never the key, the destination or the server's code."""
    view = {name: record[name] for name in _PUBLIC}
    view["lines"] = list(view["lines"])
    if view["connectors"] is not None:
        view["connectors"] = list(view["connectors"])
    return view


def _decide(record: dict[str, Any], now: float, **changes: Any) -> dict[str, Any]:
    """A new record: ``record`` with ``changes``, stamped as decided now by these rules."""
    out = {**record, **changes, "updated_at": now, "rules_version": RULES_VERSION}
    out["lines"] = copy_lines(out)
    return out


def _window_end(record: dict[str, Any]) -> float:
    return record["created_at"] + WINDOW


def _lease_lapsed(record: dict[str, Any], now: float) -> bool:
    return now >= (record["reserved_until"] or 0.0)


def _refusal(status: int | None) -> bool:
    """Whether ``status`` is a refusal of this request that may be Gone or final. A 401 is the
    Bearer's (the caller refreshes it), 429 and 5xx are the service's load: all retry."""
    return status is not None and 400 <= status < 500 and status not in (401, 429)


def _last_code(answer: Answer) -> str:
    if answer.status is None:
        return "transport"
    return answer.code or f"http_{answer.status}"
