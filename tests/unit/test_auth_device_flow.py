"""The device flow's rules (RFC 8628): every answer of the token endpoint and of the device
code request, as a decision. Pure: no portal, no clock, no sleeping."""

from __future__ import annotations

import socket

import httpx
import pytest

from nous.portal import unreachable_why
from nous.portal_errors import (
    PortalBusy,
    PortalInvalidAnswer,
    PortalRefused,
    PortalTLSError,
    PortalUnreachable,
)
from services.auth_worker.device_flow import (
    BACKOFF_CAP,
    FIRST_DEVICE_CODE_PAUSE,
    MAX_POLL_SECONDS,
    MIN_INTERVAL,
    SLOW_DOWN_STEP,
    DeviceCodeRetries,
    Poll,
    after_device_code_error,
    after_poll_error,
    poll_expired,
    poll_seconds,
    retrying,
)
from services.auth_worker.states import RETRY_BUSY, Failed, Reason, Retrying, TimedOut

UNREACHABLE = PortalUnreachable("the portal did not answer")


def refused(code: str, status: int = 400) -> PortalRefused:
    return PortalRefused(code, status)


def busy(retry_after: float = 0.0, status: int = 503) -> PortalBusy:
    return PortalBusy(f"HTTP {status}", status=status, retry_after=retry_after)


def test_a_poll_starts_at_the_portals_interval_never_below_the_floor():
    assert Poll.start(5.0) == Poll(interval=5.0, wait=5.0, unreachable=False)
    assert Poll.start(0.0) == Poll(interval=MIN_INTERVAL, wait=MIN_INTERVAL)


def test_authorization_pending_polls_again_at_the_interval():
    after_a_backoff = Poll(interval=5.0, wait=30.0, unreachable=True)
    assert after_poll_error(after_a_backoff, refused("authorization_pending")) == Poll(5.0, 5.0, False)


def test_slow_down_widens_the_interval_by_five_seconds_for_good():
    slower = after_poll_error(Poll.start(5.0), refused("slow_down"))
    assert SLOW_DOWN_STEP == 5.0
    assert slower == Poll(interval=10.0, wait=10.0)
    assert after_poll_error(slower, refused("authorization_pending")) == Poll(10.0, 10.0)
    assert after_poll_error(slower, refused("slow_down")) == Poll(15.0, 15.0)


@pytest.mark.parametrize(
    ("code", "end"),
    [
        ("expired_token", TimedOut()),
        ("access_denied", Failed(Reason.ACCESS_DENIED)),
        ("invalid_grant", Failed(Reason.PORTAL_REFUSED)),
        ("invalid_client", Failed(Reason.PORTAL_REFUSED)),
        ("a_code_from_the_future", Failed(Reason.PORTAL_REFUSED)),
    ],
)
def test_every_other_oauth_answer_ends_the_sign_in(code, end):
    assert after_poll_error(Poll.start(5.0), refused(code)) == end


def test_a_busy_portal_backs_off_doubling_and_its_retry_after_is_honoured_up_to_the_cap():
    poll = Poll.start(5.0)
    assert after_poll_error(poll, busy()) == Poll(interval=5.0, wait=10.0, unreachable=False, failures=1)
    assert after_poll_error(poll, busy(retry_after=20.0, status=429)) == Poll(5.0, 20.0, failures=1)
    assert after_poll_error(poll, busy(retry_after=120.0)) == Poll(5.0, BACKOFF_CAP, failures=1)
    assert after_poll_error(Poll.start(20.0), busy()) == Poll(20.0, BACKOFF_CAP, failures=1)
    # The backoff is for the next request only: the interval the portal asked for stays.
    assert after_poll_error(after_poll_error(poll, busy()), refused("authorization_pending")) == poll


def test_no_answer_at_all_backs_off_and_is_remembered_until_an_answer_comes():
    down = after_poll_error(Poll.start(5.0), UNREACHABLE)
    assert down == Poll(interval=5.0, wait=10.0, unreachable=True, failures=1)
    assert poll_expired(down) == Failed(Reason.PORTAL_UNREACHABLE)
    assert poll_expired(after_poll_error(down, busy())) == TimedOut()
    assert poll_expired(after_poll_error(down, refused("authorization_pending"))) == TimedOut()
    assert poll_expired(Poll.start(5.0)) == TimedOut()


def test_an_answer_that_cannot_be_used_ends_the_poll_typed():
    poll = Poll.start(5.0)
    assert after_poll_error(poll, PortalInvalidAnswer("not JSON")) == Failed(Reason.PORTAL_INVALID_ANSWER)
    assert after_poll_error(poll, PortalTLSError("bad certificate")) == Failed(Reason.TLS_FAILED)


def test_the_poll_has_one_deadline_the_codes_expiry_at_most_half_an_hour():
    assert poll_seconds(900.0) == 900.0
    assert poll_seconds(24 * 3600.0) == MAX_POLL_SECONDS == 1800.0


def test_device_code_retries_double_their_pause_up_to_the_cap():
    retries, waits = DeviceCodeRetries(), []
    for _ in range(8):
        step = after_device_code_error(retries, UNREACHABLE)
        assert isinstance(step, DeviceCodeRetries)
        retries = step
        waits.append(retries.wait)
    assert FIRST_DEVICE_CODE_PAUSE == 0.5
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, BACKOFF_CAP, BACKOFF_CAP]


def test_a_device_code_retry_honours_retry_after_beyond_the_cap():
    step = after_device_code_error(DeviceCodeRetries(), busy(retry_after=45.0, status=429))
    assert isinstance(step, DeviceCodeRetries) and step.wait == 45.0 and step.pause == 1.0


def test_a_device_code_budget_that_runs_out_ends_as_the_last_failure_says():
    assert DeviceCodeRetries().given_up == Failed(Reason.PORTAL_UNREACHABLE)  # no answer at all yet
    after_silence = after_device_code_error(DeviceCodeRetries(), UNREACHABLE)
    after_load = after_device_code_error(DeviceCodeRetries(), busy())
    assert isinstance(after_silence, DeviceCodeRetries) and isinstance(after_load, DeviceCodeRetries)
    assert after_silence.given_up == Failed(Reason.PORTAL_UNREACHABLE)
    assert after_load.given_up == Failed(Reason.PORTAL_REFUSED)


@pytest.mark.parametrize(
    ("error", "end"),
    [
        (refused("invalid_client"), Failed(Reason.PORTAL_REFUSED)),
        (PortalInvalidAnswer("no user_code"), Failed(Reason.PORTAL_INVALID_ANSWER)),
        (PortalTLSError("bad certificate"), Failed(Reason.TLS_FAILED)),
    ],
)
def test_any_other_device_code_failure_is_final(error, end):
    assert after_device_code_error(DeviceCodeRetries(), error) == end


def test_the_poll_counts_failures_in_a_row_and_an_answer_starts_the_count_over():
    poll = Poll.start(5.0)
    for expected in (1, 2, 3):
        poll = after_poll_error(poll, UNREACHABLE if expected % 2 else busy())
        assert isinstance(poll, Poll) and poll.failures == expected
    assert after_poll_error(poll, refused("authorization_pending")).failures == 0
    assert after_poll_error(poll, refused("slow_down")).failures == 0


def test_device_code_retries_count_their_attempts():
    retries = DeviceCodeRetries()
    for expected in (1, 2, 3):
        step = after_device_code_error(retries, busy() if expected == 2 else UNREACHABLE)
        assert isinstance(step, DeviceCodeRetries) and step.attempt == expected
        retries = step


def test_retrying_says_how_the_portal_gave_no_answer():
    refused_connection = PortalUnreachable("no answer", why=PortalUnreachable.CONNECTION_REFUSED)
    assert retrying("s1", refused_connection, 2, 1.0) == Retrying("s1", PortalUnreachable.CONNECTION_REFUSED, 2, 1.0)
    assert retrying("s1", UNREACHABLE, 1, 0.5).reason == PortalUnreachable.NO_CONNECTION
    assert retrying("s1", busy(retry_after=7.0), 1, 7.0).reason == RETRY_BUSY


def _connect_error(*causes: BaseException) -> httpx.ConnectError:
    """A connect failure as httpx raises it under trio: the attempts' errors grouped as its cause."""
    error = httpx.ConnectError("all attempts to connect failed")
    error.__cause__ = OSError("all attempts to connect failed")
    error.__cause__.__context__ = ExceptionGroup("attempts", list(causes))
    return error


@pytest.mark.parametrize(
    ("error", "why"),
    [
        (_connect_error(ConnectionRefusedError(111, "refused")), PortalUnreachable.CONNECTION_REFUSED),
        (_connect_error(OSError(113, "no route"), ConnectionRefusedError(111, "refused")), "connection_refused"),
        (_connect_error(socket.gaierror(-2, "Name or service not known")), PortalUnreachable.NAME_NOT_RESOLVED),
        (httpx.ReadTimeout("timed out"), PortalUnreachable.TIMED_OUT),
        (httpx.ConnectTimeout("timed out"), PortalUnreachable.TIMED_OUT),
        (httpx.RemoteProtocolError("Server disconnected without sending a response."), "connection_dropped"),
        (httpx.ReadError("reset"), PortalUnreachable.CONNECTION_DROPPED),
        (_connect_error(OSError(113, "no route")), PortalUnreachable.NO_CONNECTION),
    ],
    ids=[
        "refused",
        "one-attempt-refused",
        "unresolved",
        "read-timeout",
        "connect-timeout",
        "dropped",
        "reset",
        "other",
    ],
)
def test_how_a_request_got_no_answer_is_read_from_the_transport_error(error, why):
    assert unreachable_why(error) == why
