"""How long the updater lets ``systemctl restart`` wait for a unit: the unit's own stop and
start limits, as ``systemctl show`` reports them, plus slack for the client itself.

A blunt restart must neither give up before systemd could have finished (a unit allowed 5
minutes to start is not stuck after 90 s) nor wait forever (an unattended update has to end).
So each phase counts with the limit the unit declares, a phase without a usable limit (none
shown, unreadable, zero or infinite) counts with systemd's default, and the sum is capped
where subprocess polling can still represent it. Pure: no I/O, safe to call anywhere.
"""

from __future__ import annotations

import math
import re

from fleet.supervisors.systemd import CLIENT_SLACK

# systemd's DefaultTimeoutStartSec/DefaultTimeoutStopSec: what a phase without a usable limit gets.
PHASE_FALLBACK = 90.0
# subprocess waits through poll(), whose timeout is a signed 32-bit count of milliseconds:
# (2**31 - 1) ms is 2147483.647 s. One whole second below the last whole second under it
# leaves headroom for rounding seconds up to milliseconds and for time already spent.
MAX_BUDGET = float(2**31 // 1000 - 1)

# systemd's USEC_INFINITY: a raw value of all ones is "no limit".
_USEC_INFINITY = 2**64 - 1
_USEC = 1e-6
_SECOND = 1.0
_MINUTE = 60.0
_HOUR = 3600.0
_DAY = 86400.0
# systemd's fixed lengths: a month is 30.44 days, a year 365.25 days.
_MONTH = 2629800.0
_YEAR = 31557600.0
_UNITS = {
    **dict.fromkeys(("us", "usec", "µs", "μs"), _USEC),
    **dict.fromkeys(("ms", "msec"), 1e-3),
    **dict.fromkeys(("s", "sec", "second", "seconds"), _SECOND),
    **dict.fromkeys(("m", "min", "minute", "minutes"), _MINUTE),
    **dict.fromkeys(("h", "hr", "hour", "hours"), _HOUR),
    **dict.fromkeys(("d", "day", "days"), _DAY),
    **dict.fromkeys(("w", "week", "weeks"), 7 * _DAY),
    **dict.fromkeys(("M", "month", "months"), _MONTH),
    **dict.fromkeys(("y", "year", "years"), _YEAR),
}
# One "<number><unit>" part; systemd allows blanks between parts and before the unit.
_PART = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([^\W\d_]+)\s*")


def parse_span(value: str | int | None) -> float | None:
    """Seconds in a ``*USec`` value of ``systemctl show``; None when it is not one.

    A raw number (an int, or a string of digits) is microseconds. A formatted span is one or
    more ``<number><unit>`` parts in systemd's units (``1min 30s``, ``1d 6h``, ``2.500000s``).
    ``infinity`` is ``math.inf``; anything systemd could not hold (beyond its microsecond
    range) is None, like anything else unreadable.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return _from_usec(value)
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text == "infinity":
        return math.inf
    if text.isascii() and text.isdigit():
        # More digits than 2**64 has cannot be a value of systemd's (nor need int() to read them).
        return _from_usec(int(text)) if len(text) <= len(str(_USEC_INFINITY)) else None
    return _formatted(text)


def _from_usec(usec: int) -> float | None:
    if usec == _USEC_INFINITY:
        return math.inf
    if not 0 <= usec < _USEC_INFINITY:
        return None
    return usec / 1e6


def _formatted(text: str) -> float | None:
    total, position = 0.0, 0
    while position < len(text):
        part = _PART.match(text, position)
        if part is None or part.group(2) not in _UNITS:
            return None
        total += float(part.group(1)) * _UNITS[part.group(2)]
        position = part.end()
    if position == 0 or total * 1e6 >= _USEC_INFINITY:
        return None
    return total


def _phase(value: str | int | None) -> float:
    seconds = parse_span(value)
    # systemd shows a zero limit as "infinity" (no limit); an unattended update still needs one.
    if seconds is None or seconds == 0 or math.isinf(seconds):
        return PHASE_FALLBACK
    return seconds


def restart_budget(stop: str | int | None, start: str | int | None, *, start_only: bool = False) -> float:
    """The ``systemctl`` client timeout, in seconds, for restarting a unit whose
    ``TimeoutStopUSec`` is ``stop`` and ``TimeoutStartUSec`` is ``start``.

    ``start_only``: nothing is left to stop (the gateway drained and exited), so only the
    start is waited for. Always finite, at least the slack, and at most ``MAX_BUDGET``.
    """
    total = _phase(start) + CLIENT_SLACK
    if not start_only:
        total += _phase(stop)
    return min(total, MAX_BUDGET)
