"""Lifecycle reports from a Hermes process to the Pohunek hook reporter.

Hermes calls these from inside an agent turn, so a report never blocks on the reporter,
never raises, never starts a process, uses the network or opens a database. Outside a
Pohunek-managed session (no valid ``POHUNEK_SESSION_ID``) every call returns at once and
reports nothing.

A report is payload-free by construction (``shared.hook_vocabulary``): its only strings are
ids and values from small fixed sets, so an argument that could hold what a user typed (a
prompt, a path, a command line) does not fit and the report is dropped. Every call
returns whether the report was handed to zmq; each outcome is counted (``counters()``):

- ``sent``: handed to zmq;
- ``unmanaged``: not in a managed session;
- ``refused``: an argument or the frame broke a rule;
- ``not_accepted``: zmq would not take it (no reporter, or one not keeping up);
- ``error``: anything else, swallowed.

The frame goes over a PUSH socket to the reporter's intake.
"""

from __future__ import annotations

import atexit
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq

from shared import homes
from shared import hook_vocabulary as vocabulary
from shared.hook_vocabulary import HookReportError
from shared.identity import current_identity
from shared.protocol import pack
from shared.transport import ipc_unreachable

SESSION_ENV = "POHUNEK_SESSION_ID"
ENDPOINT_ENV = "POHUNEK_HOOK_ENDPOINT"
LAUNCH_EXE_ENV = "POHUNEK_LAUNCH_EXE"
LAUNCH_SCRIPT_ENV = "POHUNEK_LAUNCH_SCRIPT"
PTY_ROOT_PID_ENV = "POHUNEK_PTY_ROOT_PID"

SNDHWM = 256
LINGER_MS = 200  # reports still queued at exit get this long to leave
# With IMMEDIATE a new socket accepts nothing until its connection is up (a few hundred µs),
# which would drop every process's first report. So once per process, and only when a
# reporter listens on the intake, the first call waits at most this long for it. The wait
# ends as soon as the connection is up, so only a loaded machine, where it can take
# milliseconds, pays for the margin.
CONNECT_GRACE_MS = 50
NATIVE_ID_TRIES = 20
NATIVE_ID_RETRY_DELAY = 0.05

COUNTERS = ("sent", "unmanaged", "refused", "not_accepted", "error")


class RefusedReport(HookReportError):
    """A report broke a rule of its shape; it is dropped and counted, never raised to a caller."""

    code = "hook_report_refused"


def _id(value: object) -> str:
    if not vocabulary.is_id(value):
        raise RefusedReport("an id must be 1-128 of A-Z a-z 0-9 . _ : -")
    return value


def _one_of(value: object, allowed: frozenset[str]) -> str:
    if not vocabulary.is_one_of(value, allowed):
        raise RefusedReport(f"expected one of {sorted(allowed)}")
    return value


def _root_pid(raw: str | None) -> int | None:
    return int(raw) if raw and re.fullmatch(r"[0-9]{1,10}", raw) and int(raw) > 0 else None


@dataclass(frozen=True)
class _Connection:
    """What one process reports through: its own identity, context and socket."""

    pid: int
    start_time: int
    context: zmq.Context
    socket: zmq.Socket


# Every client alive, so that a fork and the interpreter's exit can reach each one.
_live: weakref.WeakSet[HookClient] = weakref.WeakSet()


class HookClient:
    """The reports of one process; the module-level functions use one built from ``os.environ``.

    ``env`` is read once, here. ``root`` is the root home whose ``run/`` holds the reporter's
    intake; None means the one ``env`` names, resolved when the socket is first made.
    """

    def __init__(self, env: Mapping[str, str], root: Path | None = None) -> None:
        session = env.get(SESSION_ENV)
        self._session = session if vocabulary.is_id(session) else None
        self._env = dict(env)
        self._root = root
        self._launch = {
            "exe": env.get(LAUNCH_EXE_ENV) or None,
            "script": env.get(LAUNCH_SCRIPT_ENV) or None,
            "root_pid": _root_pid(env.get(PTY_ROOT_PID_ENV)),
        }
        # One lock for the socket and the counts: a zmq socket must never be used by two
        # threads at once, and it is held only for a non-blocking send.
        self._lock = threading.Lock()
        self._conn: _Connection | None = None
        self._counts = dict.fromkeys(COUNTERS, 0)
        _live.add(self)

    # --- reports ---------------------------------------------------------------------------

    def report_native_id(self, native_id: str, *, resumed: bool = False) -> bool:
        """Hermes's own session id, new or resumed, with the launch claim the launcher set
        (the reporter checks the claim against the process table; this only carries it)."""

        def fields() -> dict[str, Any]:
            if type(resumed) is not bool:
                raise RefusedReport("resumed must be a bool")
            return {"native_id": _id(native_id), "resumed": resumed, "launch": self._launch}

        return self._report("native_id", fields)

    def report_continuation(self, continuation_ids: Sequence[str]) -> bool:
        """The ids a session continues under after compaction (1 to 16)."""

        def fields() -> dict[str, Any]:
            # A str is a Sequence too: "abc" must not pass as three one-letter ids.
            if isinstance(continuation_ids, str) or not isinstance(continuation_ids, Sequence):
                raise RefusedReport("continuation_ids must be a sequence of ids")
            if not 1 <= len(continuation_ids) <= vocabulary.MAX_CONTINUATION_IDS:
                raise RefusedReport(f"continuation_ids must hold 1 to {vocabulary.MAX_CONTINUATION_IDS} ids")
            return {"continuation_ids": [_id(i) for i in continuation_ids]}

        return self._report("continuation", fields)

    def report_activity(self, state: str) -> bool:
        """Whether the agent is working or idle."""
        return self._report("activity", lambda: {"state": _one_of(state, vocabulary.ACTIVITY_STATES)})

    def report_attention(self, reason: str = "owner_approval") -> bool:
        """The agent waits for its owner (an approval)."""
        return self._report("attention", lambda: {"reason": _one_of(reason, vocabulary.ATTENTION_REASONS)})

    def report_release(self, reason: str) -> bool:
        """Final release evidence for the session's agent state.

        ``session_end`` comes from Hermes's ``on_session_end``, which is NOT a process-exit
        report: the session ended, the process may well run on. ``agent_exit`` is the process
        leaving; ``handoff`` gives the session to another process.
        """
        return self._report("release", lambda: {"reason": _one_of(reason, vocabulary.RELEASE_REASONS)})

    def prepare(self, wait_ms: int = 0) -> bool:
        """Open the socket now (in a managed session), outside any turn, so that no report pays
        for the connection, and wait up to ``wait_ms`` more for the reporter's; whether a report
        would be accepted now. Never raises: a failure here is met again, and counted, by a report."""
        with self._lock:
            if self._session is None:
                return False
            try:
                return bool(self._connection().socket.poll(wait_ms, zmq.POLLOUT))
            except Exception:
                return False

    def counters(self) -> dict[str, int]:
        """A copy of the outcome counts."""
        with self._lock:
            return dict(self._counts)

    def close(self) -> None:
        """Give queued reports up to ``LINGER_MS`` to leave, then close. Runs at exit; a
        later report opens a new socket."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None and conn.pid == os.getpid():
            try:
                conn.socket.close()
                conn.context.term()
            except zmq.ZMQError:
                pass  # at exit, nothing is left to tell

    # --- machinery -------------------------------------------------------------------------

    def _report(self, kind: str, fields: Callable[[], dict[str, Any]]) -> bool:
        with self._lock:
            if self._session is None:
                outcome = "unmanaged"
            else:
                try:
                    outcome = self._send(kind, fields)
                except Exception:
                    outcome = "error"
            self._counts[outcome] += 1
        return outcome == "sent"

    def _send(self, kind: str, fields: Callable[[], dict[str, Any]]) -> str:
        try:
            body = fields()  # before any socket exists: a refused report opens nothing
            conn = self._connection()
            frame = {
                "v": vocabulary.VERSION,
                "kind": kind,
                "session": self._session,
                "pid": conn.pid,
                "start_time": conn.start_time,
                "at": time.time(),
                **body,
            }
            try:
                raw = pack(frame)
            except (TypeError, ValueError):  # e.g. a launch path that is not valid UTF-8
                raise RefusedReport("the report cannot be encoded") from None
            if len(raw) > vocabulary.MAX_REPORT_BYTES:
                raise RefusedReport(f"a report is at most {vocabulary.MAX_REPORT_BYTES} bytes")
            conn.socket.send(raw, zmq.NOBLOCK)
        except RefusedReport:
            return "refused"
        except zmq.Again:
            # IMMEDIATE makes "no reporter connected" and "reporter not keeping up" (the
            # pipe is at its high-water mark) the same Again; they cannot be told apart here.
            return "not_accepted"
        return "sent"

    def _connection(self) -> _Connection:
        pid = os.getpid()
        if self._conn is None or self._conn.pid != pid:
            # A forked child never touches its parent's context (libzmq is not fork-safe);
            # it makes its own and leaves the parent's alone (pyzmq never closes it here).
            self._conn = self._open(pid)
        return self._conn

    def _open(self, pid: int) -> _Connection:
        address = self._intake()
        identity = current_identity()
        # A private context: the shared one is terminated by ``reexec_module``, which would
        # wait forever on this socket, and closing ours at exit waits on no one else's.
        context = zmq.Context()
        try:
            sock = context.socket(zmq.PUSH)
            sock.setsockopt(zmq.SNDHWM, SNDHWM)
            sock.setsockopt(zmq.IMMEDIATE, 1)  # no reporter: a send fails at once, nothing queues
            sock.setsockopt(zmq.LINGER, LINGER_MS)
            sock.connect(address)
            if not ipc_unreachable(address):  # no file, or one a dead reporter left: no wait
                sock.poll(CONNECT_GRACE_MS, zmq.POLLOUT)
        except BaseException:
            context.destroy(linger=0)
            raise
        return _Connection(pid, identity.start_time, context, sock)

    def _intake(self) -> str:
        override = self._env.get(ENDPOINT_ENV, "")
        if override.startswith("ipc://") and len(override) > len("ipc://"):
            return override
        root = homes.root_home(self._env) if self._root is None else self._root
        return intake_address(root, self._env)


def intake_address(root: Path, env: Mapping[str, str] | None = None) -> str:
    """Where the hook reporter of ``root`` takes reports: ``hook_reporter.in`` in its endpoint's
    directory, always ipc, even when its control socket is on TCP (the one definition the
    client and the reporter share)."""
    directory = homes.endpoint(root, "hook_reporter", create=False, env=env).directory
    return f"ipc://{directory / 'hook_reporter.in'}"


def _after_fork_in_child() -> None:
    # A lock some other thread of the parent held at the fork would stay held here forever.
    global _default_lock
    _default_lock = threading.Lock()
    for client in list(_live):
        client._lock = threading.Lock()


def _close_all() -> None:
    for client in list(_live):
        client.close()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_all)


# --- the process's own client ---------------------------------------------------------------

_default: HookClient | None = None
_default_lock = threading.Lock()


def _client() -> HookClient:
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = HookClient(os.environ)
    return _default


def prepare(wait_ms: int = 0) -> bool:
    """``HookClient.prepare`` for this process."""
    return _client().prepare(wait_ms)


def report_native_id(native_id: str, *, resumed: bool = False) -> bool:
    """``HookClient.report_native_id`` for this process."""
    return _client().report_native_id(native_id, resumed=resumed)


def claim_native_id(native_id: str, *, resumed: bool = False) -> None:
    """Report the native id, trying again (briefly, at most ``NATIVE_ID_TRIES`` times) while the
    reporter does not accept it yet: a new connection can miss the first report on a loaded
    machine, and without this one report the session can never be resumed."""
    for _ in range(NATIVE_ID_TRIES):
        refused_before = counters()["not_accepted"]
        if report_native_id(native_id, resumed=resumed) or counters()["not_accepted"] == refused_before:
            return  # sent, or not to be sent at all (unmanaged, refused)
        time.sleep(NATIVE_ID_RETRY_DELAY)


def report_continuation(continuation_ids: Sequence[str]) -> bool:
    """``HookClient.report_continuation`` for this process."""
    return _client().report_continuation(continuation_ids)


def report_activity(state: str) -> bool:
    """``HookClient.report_activity`` for this process."""
    return _client().report_activity(state)


def report_attention(reason: str = "owner_approval") -> bool:
    """``HookClient.report_attention`` for this process."""
    return _client().report_attention(reason)


def report_release(reason: str) -> bool:
    """``HookClient.report_release`` for this process; ``session_end`` is not a process-exit report."""
    return _client().report_release(reason)


def counters() -> dict[str, int]:
    """This process's outcome counts (a copy)."""
    return _client().counters()
