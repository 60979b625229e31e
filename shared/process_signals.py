"""Signals to a process the mesh identified, checked by the kernel rather than just before.

A pid is recycled once its process is reaped, so "is it still that process? then signal it"
leaves a window in which the pid may name a newcomer. On Linux a process is held by a pidfd
opened *before* its identity (pid and start time) is checked: the descriptor names whatever
held the pid at the open, so a check that passes after it proves the descriptor is that
process, and a signal sent through it reaches nobody else however late it is sent. The same
descriptor tells when the process has ended. Where there is no pidfd (not Linux, a kernel
before 5.3), the identity is checked right before each signal, and that window stays.
"""

from __future__ import annotations

import os
import select
import signal
import time

from shared.identity import ProcessIdentity, is_alive

_PIDFD = hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")
_POLL = 0.05  # how often ``wait_gone`` looks without a pidfd


class HeldProcess:
    """One identified process, held while the mesh may signal it or wait for its end."""

    def __init__(self, ident: ProcessIdentity, fd: int | None) -> None:
        self.ident = ident
        self._fd = fd

    @classmethod
    def hold(cls, ident: ProcessIdentity) -> HeldProcess | None:
        """That very process, held; None when it has ended or another process has its pid."""
        fd = _open(ident.pid)
        if not is_alive(ident):  # checked after the open: a pass proves the pidfd names it
            if fd is not None:
                os.close(fd)
            return None
        return cls(ident, fd)

    def signal(self, signum: int, *, group: bool = False) -> bool:
        """``signum`` to the process (``group``: to the process group it leads, while it lives;
        a process that leads none gets it alone). False when it has ended."""
        pid = self.ident.pid
        try:
            if group and self.alive() and os.getpgid(pid) == pid:
                # A living leader keeps its pid, so its group's id cannot name another group.
                os.killpg(pid, signum)
            elif self._fd is not None:
                signal.pidfd_send_signal(self._fd, signum)
            elif is_alive(self.ident):
                os.kill(pid, signum)
            else:
                return False
        except ProcessLookupError:
            return False
        return True

    def alive(self) -> bool:
        """Whether it still runs (a zombie has ended)."""
        if self._fd is None:
            return is_alive(self.ident)
        readable, _, _ = select.select([self._fd], [], [], 0)  # a pidfd turns readable at the end
        return not readable

    def wait_gone(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for its end; whether it came."""
        if self._fd is not None:
            readable, _, _ = select.select([self._fd], [], [], max(timeout, 0.0))
            return bool(readable)
        deadline = time.monotonic() + timeout
        while is_alive(self.ident):
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL)
        return True

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> HeldProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _open(pid: int) -> int | None:
    if not _PIDFD:
        return None
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    except OSError:  # a kernel without pidfd_open (ENOSYS): the identity is checked per signal
        return None


def signal_identified(ident: ProcessIdentity, signum: int, *, group: bool = False) -> bool:
    """``signum`` to that very process (or the group it leads), never to a newcomer with its
    pid; False when it has ended."""
    held = HeldProcess.hold(ident)
    if held is None:
        return False
    with held:
        return held.signal(signum, group=group)
