"""The device flow's rules (RFC 8628): what each answer of the portal means for a sign-in.

An answer in, a decision out: wait this long and ask again, or stop with this state. No I/O
and no clock here: the sign-in's loops (``signin``) send the requests, sleep and keep the
deadlines, and ask these rules what comes next.
"""

from __future__ import annotations

from dataclasses import dataclass

from nous.portal_errors import (
    PortalBusy,
    PortalError,
    PortalInvalidAnswer,
    PortalRefused,
    PortalTLSError,
    PortalUnreachable,
)
from services.auth_worker.states import RETRY_BUSY, Failed, Reason, Retrying, SignInState, TimedOut

# How long asking for a device code may take, retries of a busy portal included.
DEVICE_CODE_BUDGET = 30.0
# The first pause before asking for a device code again; it doubles after each failure.
FIRST_DEVICE_CODE_PAUSE = 0.5
# The longest one sign-in waits for approval, whatever the code's own expiry says.
MAX_POLL_SECONDS = 30 * 60.0
# The shortest pause between two polls, whatever the portal asks for.
MIN_INTERVAL = 0.2
# What RFC 8628 adds to the interval after ``slow_down``.
SLOW_DOWN_STEP = 5.0
# The longest pause between two polls of a failing portal, and the most the device-code pause grows to.
BACKOFF_CAP = 30.0


def failure(error: PortalError) -> Failed:
    """The sign-in's end after ``error``, once no retry is left."""
    if isinstance(error, PortalTLSError):
        return Failed(Reason.TLS_FAILED)
    if isinstance(error, PortalUnreachable):
        return Failed(Reason.PORTAL_UNREACHABLE)
    if isinstance(error, PortalInvalidAnswer):
        return Failed(Reason.PORTAL_INVALID_ANSWER)
    return Failed(Reason.PORTAL_REFUSED)


# --- asking for a device code ------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceCodeRetries:
    """Where asking for a device code stands after a failure."""

    wait: float = 0.0  # the pause before asking again
    pause: float = FIRST_DEVICE_CODE_PAUSE  # the pause after the next failure, before its Retry-After
    given_up: Failed = Failed(Reason.PORTAL_UNREACHABLE)  # the sign-in's end if the budget runs out now
    attempt: int = 0  # the failures so far


def after_device_code_error(retries: DeviceCodeRetries, error: PortalError) -> DeviceCodeRetries | Failed:
    """Ask again later (a busy or unreachable portal), or stop: any other failure is for good."""
    if not isinstance(error, (PortalBusy, PortalUnreachable)):
        return failure(error)
    retry_after = error.retry_after if isinstance(error, PortalBusy) else 0.0
    return DeviceCodeRetries(
        wait=max(retries.pause, retry_after),
        pause=min(retries.pause * 2, BACKOFF_CAP),
        given_up=failure(error),
        attempt=retries.attempt + 1,
    )


def retrying(sign_in_id: str, error: PortalError, attempt: int, wait: float) -> Retrying:
    """What the sign-in shows while it waits to ask again after ``error`` (busy or unreachable)."""
    reason = error.why if isinstance(error, PortalUnreachable) else RETRY_BUSY
    return Retrying(sign_in_id=sign_in_id, reason=reason, attempt=attempt, retry_in=wait)


# --- polling the token endpoint ----------------------------------------------------------------


@dataclass(frozen=True)
class Poll:
    """Where the token poll stands between two requests."""

    interval: float  # the pause between polls the portal asked for, widened by each slow_down
    wait: float  # the pause before the next request
    unreachable: bool = False  # whether the last request got no answer at all
    failures: int = 0  # the busy or unreachable answers in a row, the last one included

    @classmethod
    def start(cls, interval: float) -> Poll:
        """The poll of a device code whose answer named ``interval``."""
        interval = max(interval, MIN_INTERVAL)
        return cls(interval=interval, wait=interval)


def poll_seconds(expires_in: float) -> float:
    """The one deadline of the poll: the code's own expiry, at most ``MAX_POLL_SECONDS``."""
    return min(expires_in, MAX_POLL_SECONDS)


def after_poll_error(poll: Poll, error: PortalError) -> Poll | SignInState:
    """The next poll, or the sign-in's end, after the token endpoint answered ``error``."""
    if isinstance(error, PortalRefused):
        if error.error == "authorization_pending":
            return Poll(interval=poll.interval, wait=poll.interval)
        if error.error == "slow_down":
            slower = poll.interval + SLOW_DOWN_STEP
            return Poll(interval=slower, wait=slower)
        if error.error == "expired_token":
            return TimedOut()
        if error.error == "access_denied":
            return Failed(Reason.ACCESS_DENIED)
        return Failed(Reason.PORTAL_REFUSED)
    if isinstance(error, (PortalBusy, PortalUnreachable)):
        # Keep polling, backing off: the code is good until it expires.
        retry_after = error.retry_after if isinstance(error, PortalBusy) else 0.0
        return Poll(
            interval=poll.interval,
            wait=min(max(poll.interval * 2, retry_after), BACKOFF_CAP),
            unreachable=isinstance(error, PortalUnreachable),
            failures=poll.failures + 1,
        )
    return failure(error)


def poll_expired(poll: Poll) -> SignInState:
    """The sign-in's end when the poll's deadline passed: the code expired, or the portal was
    out of reach to the end."""
    return Failed(Reason.PORTAL_UNREACHABLE) if poll.unreachable else TimedOut()
