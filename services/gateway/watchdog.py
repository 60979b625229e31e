"""systemd's watchdog, as a rule (no I/O): whether this process is the one asked to feed it,
and how often.

systemd hands the main process of a unit with ``WatchdogSec=`` the interval in
``WATCHDOG_USEC`` and that process's pid in ``WATCHDOG_PID``; a child that inherited both is
not the one watched and must not feed it. The same reading as libsystemd's
``sd_watchdog_enabled``: a value that is not a positive decimal number turns it off. Feeding
every half interval leaves a whole half of slack for one late feed.
"""

from __future__ import annotations

from collections.abc import Mapping

USEC_ENV = "WATCHDOG_USEC"
PID_ENV = "WATCHDOG_PID"


def feed_interval(environ: Mapping[str, str], pid: int) -> float | None:
    """Seconds between two feeds for process ``pid`` in ``environ``; None when it feeds none."""
    usec = _positive(environ.get(USEC_ENV, ""))
    if usec is None:
        return None
    owner = environ.get(PID_ENV, "")
    if owner and _positive(owner) != pid:  # another process's watchdog, or an unreadable pid
        return None
    return usec / 2 / 1e6


def _positive(text: str) -> int | None:
    # Digits only: int() would also take "+5", " 5" and "5_000", which systemd never writes.
    if not (text.isascii() and text.isdigit()):
        return None
    return int(text) or None
