"""Which process is which: identities that survive pid reuse, and a process's full argv.

A pid alone is not an identity (pids are recycled), so every lock and state file records a
``ProcessIdentity``: the pid plus the kernel's start time for it. What a command line runs
is for ``fleet.command_lines`` to say.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import NamedTuple

_LINUX = sys.platform.startswith("linux")


class ProcessIdentity(NamedTuple):
    """One process: the same process only if both the pid and the start time match."""

    pid: int
    start_time: int  # opaque, comparable only for equality (Linux: clock ticks since boot)

    def to_dict(self) -> dict[str, int]:
        return {"pid": self.pid, "start_time": self.start_time}

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> ProcessIdentity:
        """Parse what ``to_dict`` wrote; anything else (bools, negatives, missing keys) is a ValueError."""
        if not isinstance(d, Mapping):
            raise ValueError(f"process identity must be a mapping, not {type(d).__name__}")
        pid, start_time = d.get("pid"), d.get("start_time")
        # type() rather than isinstance(): bool is an int subclass and must not pass.
        if type(pid) is not int or pid <= 0:
            raise ValueError(f"process identity pid must be a positive int, got {pid!r}")
        if type(start_time) is not int or start_time < 0:
            raise ValueError(f"process identity start_time must be a non-negative int, got {start_time!r}")
        return cls(pid, start_time)


def _probe(pid: int) -> tuple[int, bool] | None:
    """(start time, is zombie) of ``pid``, or None when it does not exist or cannot be read."""
    if type(pid) is not int or pid <= 0:
        return None
    if _LINUX:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            return None
        # comm (field 2) may hold spaces and parentheses; only the LAST ')' ends it.
        fields = stat[stat.rfind(b")") + 1 :].split()
        try:  # fields[0] is field 3 (state), so field 22 (starttime) is fields[19]
            return int(fields[19]), fields[0] in (b"Z", b"X")
        except (IndexError, ValueError):
            return None
    import psutil  # only off Linux: /proc answers faster than importing psutil

    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            start = round(proc.create_time() * 1000)
            return start, proc.status() == psutil.STATUS_ZOMBIE
    except (psutil.Error, OSError):
        return None


def process_identity(pid: int) -> ProcessIdentity | None:
    """The identity of the process now holding ``pid`` (a zombie still holds it), or None if unreadable."""
    probe = _probe(pid)
    return None if probe is None else ProcessIdentity(pid, probe[0])


def current_identity() -> ProcessIdentity:
    ident = process_identity(os.getpid())
    if ident is None:
        raise RuntimeError("cannot read this process's own start time")
    return ident


def is_alive(ident: ProcessIdentity) -> bool:
    """True while that very process runs: its pid exists, is not a zombie, and started when recorded."""
    probe = _probe(ident.pid)
    return probe is not None and probe[0] == ident.start_time and not probe[1]


def seconds_running(ident: ProcessIdentity) -> float | None:
    """How long that process has run, from its start time; None when it cannot be read."""
    if not _LINUX:
        import time

        return max(0.0, time.time() - ident.start_time / 1000)  # psutil's milliseconds
    try:
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return max(0.0, uptime - ident.start_time / os.sysconf("SC_CLK_TCK"))


def read_cmdline(pid: int) -> list[str] | None:
    """The full argv of ``pid`` (never truncated), or None when it is gone or unreadable.

    ``[]`` for a zombie, a kernel thread, or a child still inside ``execve`` (``Popen`` may
    return before the new argv is visible).
    """
    if type(pid) is not int or pid <= 0:
        return None
    if _LINUX:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                raw = f.read()
        except OSError:
            return None
        return [os.fsdecode(arg) for arg in raw.removesuffix(b"\0").split(b"\0")] if raw else []
    import psutil

    try:
        return psutil.Process(pid).cmdline()
    except (psutil.Error, OSError):
        return None


def own_pid(pid: int) -> int | None:
    """The pid process ``pid`` knows itself by: the last of ``NSpid`` in ``/proc/<pid>/status``,
    its pid in the innermost pid namespace it is in (a container's). None when it is gone.

    What a process reports about itself (``os.getpid()``) is this pid, and its start time is the
    same as seen from here, so ``ProcessIdentity(own_pid(p), start time)`` names it as it names
    itself. ``pid`` itself off Linux, or on a kernel without ``NSpid`` (before 4.1)."""
    if not _LINUX:
        return pid
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            status = f.read()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith(b"NSpid:"):
            try:
                return int(line.split()[-1])
            except ValueError:
                return None
    return pid


def peer_is(peer: int | None, pid: object, start_time: object) -> bool:
    """Whether ``peer``, the pid the kernel gave for the other end of a local connection
    (``SO_PEERCRED``), is the process that says it is ``pid`` started at ``start_time``, as it
    names itself (in its own pid namespace). False when the kernel gave none."""
    if not peer:
        return False
    probe = _probe(peer)
    return probe is not None and probe[0] == start_time and own_pid(peer) == pid


def ancestor_pids() -> set[int]:
    """The pids of this process's parent, its parent's, and so on up to the first process;
    as many as could be read."""
    if not _LINUX:
        import psutil  # only off Linux, as above

        try:
            return {p.pid for p in psutil.Process().parents()}
        except psutil.Error:
            return set()
    found: set[int] = set()
    pid = os.getppid()
    while pid > 0 and pid not in found:
        found.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            pid = int(stat[stat.rfind(b")") + 1 :].split()[1])  # field 4 (ppid), after state
        except (OSError, IndexError, ValueError):
            break
    return found


def all_pids() -> list[int]:
    """Every pid on this host (as seen from this pid namespace)."""
    if _LINUX:
        return [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]
    import psutil

    return psutil.pids()


def read_environ(pid: int) -> dict[str, str] | None:
    """The environment ``pid`` was started with, or None when it is gone or unreadable."""
    if type(pid) is not int or pid <= 0:
        return None
    if _LINUX:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                raw = f.read()
        except OSError:
            return None
        pairs = (os.fsdecode(item).partition("=") for item in raw.split(b"\0") if item)
        return {key: value for key, sep, value in pairs if sep}
    import psutil

    try:
        return psutil.Process(pid).environ()
    except (psutil.Error, OSError):
        return None
