"""The gateway's watchdog rule: whether this process feeds systemd's watchdog, and how often,
read from ``WATCHDOG_USEC`` and ``WATCHDOG_PID`` as libsystemd's ``sd_watchdog_enabled`` does."""

from __future__ import annotations

import pytest

from services.gateway.watchdog import feed_interval

PID = 4242


@pytest.mark.parametrize(
    ("environ", "interval"),
    [
        ({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": str(PID)}, 1.5),
        ({"WATCHDOG_USEC": "30000000"}, 15.0),  # no pid named: this process's, as libsystemd reads it
        ({"WATCHDOG_USEC": "1"}, 0.5e-6),
    ],
)
def test_the_watched_process_feeds_every_half_interval(environ, interval):
    assert feed_interval(environ, PID) == pytest.approx(interval)


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"WATCHDOG_PID": str(PID)},  # no interval: no watchdog
        {"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": str(PID + 1)},  # a child that inherited its parent's
        {"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": "not-a-pid"},
        {"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": "0"},
        {"WATCHDOG_USEC": "0", "WATCHDOG_PID": str(PID)},
        {"WATCHDOG_USEC": "", "WATCHDOG_PID": str(PID)},
        {"WATCHDOG_USEC": "-3000000"},
        {"WATCHDOG_USEC": "+3000000"},
        {"WATCHDOG_USEC": " 3000000"},
        {"WATCHDOG_USEC": "3_000_000"},
        {"WATCHDOG_USEC": "3e6"},
        {"WATCHDOG_USEC": "３０００"},  # digits, but not ASCII ones
    ],
)
def test_no_watchdog_of_its_own_no_feeding(environ):
    assert feed_interval(environ, PID) is None
