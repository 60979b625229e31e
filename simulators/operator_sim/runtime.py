"""One real child process on a real PTY, under trio.

The child runs through a launcher, ``setsid -c /bin/sh -c '...; exec "$@"'``: ``setsid`` makes
it a session leader with the PTY as its controlling terminal (so a resize is a real SIGWINCH
and closing the master hangs it up) and ``exec`` keeps one pid all the way down, so the shell's
``$$`` exported as ``POHUNEK_PTY_ROOT_PID`` is the pid of the program finally exec'd. Both steps
happen after the fork in programs of their own: no Python runs between fork and exec (trio
runs threads, where a ``preexec_fn`` is unsafe).

The master is non-blocking and only waited on through trio, so nothing here blocks the loop.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import signal
import struct
import termios
from collections.abc import Callable

import trio

from shared.operator.protocol import OperatorError
from simulators.operator_sim.screen import check_geometry

CHUNK = 64 * 1024
WRITE_TIMEOUT = 5.0
# After the child exits, output still buffered in the PTY is read until the slave side
# closes; a grandchild that keeps the slave open does not hold the pump past this.
DRAIN_AFTER_EXIT = 2.0
# How long a child killed with SIGKILL may take to be reaped.
REAP_TIMEOUT = 5.0
_LAUNCH = 'POHUNEK_PTY_ROOT_PID=$$; export POHUNEK_PTY_ROOT_PID; exec "$@"'


class SpawnFailed(OperatorError):
    code = "runtime_spawn_failed"

    def __init__(self, reason: str, argv: list[str]) -> None:
        program = argv[0] if argv else ""
        super().__init__(f"could not start {program!r}: {reason}", detail={"reason": reason, "program": program})


class InputStalled(OperatorError):
    code = "runtime_input_stalled"


class RuntimeClosed(OperatorError):
    """Input for a runtime whose terminal is closed or hung up."""

    code = "runtime_closed"


class Runtime:
    def __init__(self, process: trio.Process, master: int) -> None:
        self._process = process
        self._master: int | None = master
        self._write_lock = trio.Lock()
        self.pid: int = process.pid

    @classmethod
    async def spawn(cls, argv: list[str], env: dict[str, str], cwd: str, cols: int, rows: int) -> Runtime:
        check_geometry(cols, rows)
        program = _resolve(argv, env, cwd)
        launcher = shutil.which("setsid")
        if launcher is None:
            raise SpawnFailed("setsid is not installed", argv)
        master, slave = os.openpty()  # both non-inheritable: no other child gets them
        try:
            _set_size(master, cols, rows)
            os.set_blocking(master, False)
            process = await trio.lowlevel.open_process(
                [launcher, "-c", "/bin/sh", "-c", _LAUNCH, "sh", program, *argv[1:]],
                stdin=slave,
                stdout=slave,
                stderr=slave,
                cwd=cwd,
                env=env,
            )
        except (OSError, ValueError) as exc:  # a bad cwd, a NUL in an argument or the environment
            os.close(master)
            raise SpawnFailed(_reason(exc), argv) from None
        finally:
            os.close(slave)
        return cls(process, master)

    async def pump(self, on_output: Callable[[bytes], None]) -> int:
        """Read the master until the child has exited and the PTY is drained, calling
        ``on_output`` per chunk; the exit status (``-N``: killed by signal N). Cancelled, it
        kills the child's process group and reaps it before it returns."""
        hung_up = trio.Event()
        try:
            async with trio.open_nursery() as nursery:
                reading = trio.CancelScope()

                async def read() -> None:
                    with reading:
                        await self._read_until_hangup(on_output)
                    hung_up.set()

                nursery.start_soon(read)
                await self._process.wait()
                with trio.move_on_after(DRAIN_AFTER_EXIT):
                    await hung_up.wait()
                reading.cancel()
        finally:
            if self._process.returncode is None:
                with trio.CancelScope(shield=True):
                    self._signal(signal.SIGKILL)
                    with trio.move_on_after(REAP_TIMEOUT):
                        await self._process.wait()
        status = self._process.returncode
        assert status is not None  # the process was waited for above
        return status

    async def _read_until_hangup(self, on_output: Callable[[bytes], None]) -> None:
        while self._master is not None:
            try:
                data = os.read(self._master, CHUNK)
            except BlockingIOError:
                try:
                    await trio.lowlevel.wait_readable(self._master)
                except trio.ClosedResourceError:
                    return
                continue
            except OSError as exc:
                if exc.errno == errno.EIO:  # every slave fd is closed
                    return
                raise
            if not data:
                return
            on_output(data)

    async def write(
        self, data: bytes, *, then: bytes = b"", pause: float = 0.0, timeout: float = WRITE_TIMEOUT
    ) -> None:
        """Write all of ``data`` to the child's terminal, and ``then`` in a write of its own
        ``pause`` seconds later (a paste, then its submit); ``InputStalled`` when the child does
        not read within ``timeout``. Writes are serialised, so inputs never interleave."""
        async with self._write_lock:
            await self._write_all(data, timeout)
            if then:
                await trio.sleep(pause)
                await self._write_all(then, timeout)

    async def _write_all(self, data: bytes, timeout: float) -> None:
        view = memoryview(data)
        with trio.move_on_after(timeout) as stalled:
            while view:
                if self._master is None:
                    raise RuntimeClosed("the terminal is closed")
                try:
                    view = view[os.write(self._master, view) :]
                except BlockingIOError:
                    try:
                        await trio.lowlevel.wait_writable(self._master)
                    except trio.ClosedResourceError:
                        raise RuntimeClosed("the terminal is closed") from None
                except OSError as exc:
                    if exc.errno == errno.EIO:
                        raise RuntimeClosed("the terminal is hung up") from None
                    raise
        if stalled.cancelled_caught:
            written = len(data) - len(view)
            raise InputStalled(
                f"the program did not read its input within {timeout:g}s",
                detail={"written": written, "size": len(data), "timeout": timeout},
            )

    def resize(self, cols: int, rows: int) -> None:
        """Set the terminal size: the kernel sends the child's foreground group SIGWINCH."""
        check_geometry(cols, rows)
        if self._master is None:
            raise RuntimeClosed("the terminal is closed")
        _set_size(self._master, cols, rows)

    async def stop(self, grace: float = 3.0) -> None:
        """SIGTERM to the child's process group, SIGKILL after ``grace``; returns once it is
        reaped (or ``REAP_TIMEOUT`` after the SIGKILL)."""
        self._signal(signal.SIGTERM)
        with trio.move_on_after(grace):
            await self._process.wait()
        if self._process.returncode is None:
            self._signal(signal.SIGKILL)
            with trio.move_on_after(REAP_TIMEOUT):
                await self._process.wait()

    def close(self) -> None:
        """Close the master (idempotent): the child's terminal hangs up (SIGHUP)."""
        if self._master is not None:
            master, self._master = self._master, None
            trio.lowlevel.notify_closing(master)
            os.close(master)

    def _signal(self, signum: int) -> None:
        # Only while the leader is unreaped: until then its pid (the group's id) cannot be reused.
        if self._process.returncode is None:
            try:
                os.killpg(self.pid, signum)
            except ProcessLookupError:
                pass


def _resolve(argv: list[str], env: dict[str, str], cwd: str) -> str:
    """The absolute path of the program, so the shell's ``exec`` neither searches nor parses
    it as an option; what cannot start is ``SpawnFailed`` here rather than an exit 127."""
    if not argv or not argv[0]:
        raise SpawnFailed("no program given", argv)
    if not os.path.isdir(cwd):
        raise SpawnFailed(f"the working directory {cwd} does not exist", argv)
    name = argv[0]
    if "/" in name:
        path = os.path.join(cwd, name)
        if not os.path.isfile(path):
            raise SpawnFailed("no such file", argv)
        if not os.access(path, os.X_OK):
            raise SpawnFailed("not executable", argv)
        return os.path.abspath(path)
    found = shutil.which(name, path=env.get("PATH", os.defpath))
    if found is None:
        raise SpawnFailed("not found on PATH", argv)
    return os.path.abspath(os.path.join(cwd, found))


def _set_size(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _reason(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc)
