"""``python -m services.gateway_host.forkserver``: a fresh interpreter of the code on disk that
imports the gateway's code once and forks a gateway per profile when its host asks.

Its pipe to the host comes in on stdin (asks) and stdout (events); both are moved off fds 0 and
1 at once, so nothing a gateway prints can reach the pipe. It stays single-threaded, with no
zmq context and no trio run: a fork copies only the forking thread, so a lock another thread
held, or a context's I/O threads, would be broken in the child. Each fork checks this first
and refuses loudly. It reaps its children (SIGCHLD wakes its one ``select``) and reports each
exit; it dies with the host (``PR_SET_PDEATHSIG``, and the end of its pipe), and each gateway
dies with it.

A forked gateway starts as a supervisor's program would: its own signal dispositions, its
profile's home and the host's marker in its environment, its own logging, and
``run_gateway`` of the gateway's public face, ending with ``os._exit`` (nothing of the fork
server's teardown runs twice).
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import os
import select
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from fleet.supervisors import HOST_KIND, gateway_environment
from fleet.supervisors.errors import SupervisorError
from fleet.supervisors.host import HostUnsupported, require_host
from services.gateway_host import frames
from shared import exit_codes, homes, logs
from shared.errors import HermesError
from shared.identity import process_identity

log = logging.getLogger(__name__)

# The gateway's public face, loaded by name as ``python -m`` would: ``preload`` imports what a
# gateway runs, ``run_gateway`` runs one.
GATEWAY = "services.gateway"
PR_SET_PDEATHSIG = 1
READ_SIZE = 4096


class ForkUnsafe(SupervisorError):
    """This process has threads or a zmq context: a fork of it would not be sound."""

    code = "fork_unsafe"


def die_with_parent(signum: int) -> None:
    """Have the kernel send ``signum`` to this process when the thread that made it ends."""
    require_host()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        raise HostUnsupported(f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(ctypes.get_errno())}", detail={})


def fork_hazards() -> list[str]:
    """What makes a fork of this process unsafe now: other threads, a zmq context, a trio run."""
    hazards = []
    threads = len(os.listdir("/proc/self/task"))
    if threads > 1 or threading.active_count() > 1:
        hazards.append(f"{max(threads, threading.active_count())} threads")
    zmq = sys.modules.get("zmq")
    if zmq is not None and zmq.Context._instance is not None:
        hazards.append("a zmq context")
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            trio.lowlevel.current_trio_token()
            hazards.append("a trio run")
        except RuntimeError:
            pass
    return hazards


class ForkServer:
    def __init__(self, root: Path, asks: int, events: int) -> None:
        self.root = root
        self.children: dict[int, str] = {}  # pid -> profile
        self._asks = asks
        self._events = events
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def send(self, event: str, **fields: Any) -> None:
        data = frames.encode({"event": event, **fields})
        try:
            os.write(self._events, data)  # far below PIPE_BUF: one write, never split
        except BrokenPipeError:
            pass  # the host is gone: the end of the asks ends this process

    def serve(self) -> int:
        """Fork on each ask and report each exit, until the host closes the pipe."""
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wake-up fd is written
        signal.set_wakeup_fd(self._wake_w)
        lines = frames.Lines()
        while True:
            ready, _, _ = select.select([self._asks, self._wake_r], [], [])
            if self._wake_r in ready:
                while _read_some(self._wake_r):
                    pass
                self.reap()
            if self._asks in ready:
                data = os.read(self._asks, READ_SIZE)
                if not data:
                    return exit_codes.OK  # the host is done with this fork server, or gone
                for line in lines.feed(data):
                    self.handle(line)

    def handle(self, line: bytes | frames.FrameInvalid) -> None:
        """Answer one ask: a gateway forked, or a typed refusal; never raises."""
        try:
            if isinstance(line, frames.FrameInvalid):
                raise line
            profile = frames.parse_request(line)
            pid = self.fork(profile)
            # Read before this process reaps it: the pid cannot name another process yet.
            ident = process_identity(pid)
            self.send(frames.FORKED, profile=profile, pid=pid, start_time=ident.start_time if ident else 0)
        except HermesError as exc:
            log.error("refused an ask: %s", exc.message)
            field = exc.detail.get("field") if isinstance(exc.detail, dict) else None
            self.send(frames.REFUSED, code=exc.code, message=exc.message[:400], field=field)

    def fork(self, profile: str) -> int:
        hazards = fork_hazards()
        if hazards:
            raise ForkUnsafe(f"refusing to fork: this process has {', '.join(hazards)}", detail={"hazards": hazards})
        home = homes.profile_home(profile, self.root)
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            self._become_gateway(profile, home, parent)
        self.children[pid] = profile
        log.info("forked the gateway of profile %r: pid %d", profile, pid)
        return pid

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            profile = self.children.pop(pid, None)
            if profile is not None:
                self.send(frames.EXITED, profile=profile, pid=pid, code=os.waitstatus_to_exitcode(status))

    def _become_gateway(self, profile: str, home: Path, parent: int) -> None:
        code = exit_codes.FAILED
        try:
            signal.set_wakeup_fd(-1)
            for fd in (self._asks, self._events, self._wake_r, self._wake_w):
                os.close(fd)
            _reset_signals()
            die_with_parent(signal.SIGTERM)
            if os.getppid() != parent:  # the fork server died before the line above
                os._exit(exit_codes.FAILED)
            os.environ.update(gateway_environment(home, HOST_KIND))
            for handler in list(logging.root.handlers):  # the gateway configures its own
                logging.root.removeHandler(handler)
            code = importlib.import_module(GATEWAY).run_gateway()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else exit_codes.FAILED
        except BaseException:
            logging.getLogger("services.gateway").exception("the gateway of profile %r failed", profile)
        finally:
            gateway = sys.modules.get(GATEWAY)
            if gateway is not None:  # its exit duties (zmq's linger, the hook socket, logs), no teardown
                gateway.exit_now(code)
            os._exit(code)


def _reset_signals() -> None:
    """The dispositions and mask a fresh interpreter starts with."""
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _read_some(fd: int) -> bool:
    try:
        return bool(os.read(fd, READ_SIZE))
    except BlockingIOError:
        return False


def main() -> int:
    asks, events = os.dup(0), os.dup(1)  # non-inheritable copies; 0 and 1 get harmless files
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    logs.configure("gateway_forkserver")
    host = os.getppid()
    try:
        die_with_parent(signal.SIGTERM)
    except HostUnsupported as exc:
        print(f"gateway_forkserver: {exc.message}", file=sys.stderr)
        return exit_codes.CONFIG
    if os.getppid() != host:
        return exit_codes.FAILED  # the host died before the line above
    root = homes.root_home()
    code_sha = importlib.import_module(GATEWAY).preload()
    server = ForkServer(root, asks, events)
    server.send(frames.READY, pid=os.getpid(), code_sha=code_sha)
    log.info("imported the gateway's code (%s); forking on request", (code_sha or "unknown")[:12])
    return server.serve()


if __name__ == "__main__":
    sys.exit(main())
