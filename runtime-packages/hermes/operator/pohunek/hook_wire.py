"""Lifecycle reports to the hook reporter without this project's packages: the frame
``shared.hooks`` sends (the same msgpack map, ``shared.hook_vocabulary``'s words), over the same
intake socket, spoken as a ZeroMQ PUSH peer (ZMTP 3.0, NULL mechanism) on a Unix socket.
Standard library only; used by ``hooks`` where ``shared.hooks`` does not import.

The same promises as ``shared.hooks``: a report never raises, never starts a process, uses no
network (a Unix socket only, to the ``ipc://`` intake the daemon names in
``POHUNEK_HOOK_ENDPOINT``) and waits at most ``WAIT`` seconds for the reporter; outside a managed
session it returns at once. The same outcome counts: ``sent``, ``unmanaged``, ``refused``,
``not_accepted`` (no reporter, or one not keeping up), ``error``. The process's start time is
read from ``/proc``, as the reporter reads it: off Linux nothing is sent.
"""

from __future__ import annotations

import os
import re
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from . import contract as c

WAIT = 0.05  # seconds: connecting, the reporter's greeting, and one send each
NATIVE_ID_TRIES = 20
NATIVE_ID_RETRY_DELAY = 0.05
# Our ZMTP 3.0 greeting (signature, version, NULL mechanism, not a server) and READY command.
GREETING = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31
_READY_BODY = b"\x05READY" + b"\x0bSocket-Type" + struct.pack(">I", 4) + b"PUSH"
READY = b"\x04" + bytes([len(_READY_BODY)]) + _READY_BODY
_ID = re.compile(c.ID_PATTERN)


class _Refused(Exception):
    pass


# --- msgpack, for the values a report holds -----------------------------------------------


def pack(value: Any) -> bytes:
    """``value`` as msgpack with the smallest encodings (what ``msgpack.packb`` writes)."""
    if value is None:
        return b"\xc0"
    if value is True or value is False:
        return b"\xc3" if value else b"\xc2"
    if isinstance(value, int):
        return _int(value)
    if isinstance(value, float):
        return b"\xcb" + struct.pack(">d", value)
    if isinstance(value, str):
        raw = value.encode("utf-8")
        return _head(len(raw), 0xA0, 32, b"\xd9", b"\xda", b"\xdb") + raw
    if isinstance(value, (list, tuple)):
        return _head(len(value), 0x90, 16, None, b"\xdc", b"\xdd") + b"".join(pack(v) for v in value)
    if isinstance(value, dict):
        body = b"".join(pack(k) + pack(v) for k, v in value.items())
        return _head(len(value), 0x80, 16, None, b"\xde", b"\xdf") + body
    raise TypeError(f"cannot pack {type(value).__name__}")


def _int(n: int) -> bytes:
    if 0 <= n < 0x80:
        return bytes([n])
    if -32 <= n < 0:
        return struct.pack(">b", n)
    if n >= 0:
        for marker, fmt, top in ((b"\xcc", ">B", 0xFF), (b"\xcd", ">H", 0xFFFF), (b"\xce", ">I", 0xFFFFFFFF)):
            if n <= top:
                return marker + struct.pack(fmt, n)
        return b"\xcf" + struct.pack(">Q", n)
    for marker, fmt, low in ((b"\xd0", ">b", -0x80), (b"\xd1", ">h", -0x8000), (b"\xd2", ">i", -0x80000000)):
        if n >= low:
            return marker + struct.pack(fmt, n)
    return b"\xd3" + struct.pack(">q", n)


def _head(size: int, fix: int, fix_limit: int, one: bytes | None, two: bytes, four: bytes) -> bytes:
    if size < fix_limit:
        return bytes([fix | size])
    if one is not None and size <= 0xFF:
        return one + bytes([size])
    if size <= 0xFFFF:
        return two + struct.pack(">H", size)
    return four + struct.pack(">I", size)


# --- the intake ---------------------------------------------------------------------------


def message(body: bytes) -> bytes:
    """One ZMTP message frame holding ``body`` whole."""
    if len(body) <= 0xFF:
        return b"\x00" + bytes([len(body)]) + body
    return b"\x02" + struct.pack(">Q", len(body)) + body


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the reporter closed the connection")
        data += chunk
    return data


def connect(path: str) -> socket.socket:
    """A Unix socket to the intake at ``path``, past the ZMTP handshake."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(WAIT)
        sock.connect(path)
        sock.sendall(GREETING + READY)
        greeting = _read_exactly(sock, len(GREETING))
        if greeting[0] != 0xFF or greeting[9] != 0x7F or greeting[10] < 3 or greeting[12:16] != b"NULL":
            raise ConnectionError("not a ZMTP 3 peer")
        flags = _read_exactly(sock, 1)[0]
        if not flags & 0x04:
            raise ConnectionError("the reporter did not send its READY")
        size = _read_exactly(sock, 1)[0] if not flags & 0x02 else struct.unpack(">Q", _read_exactly(sock, 8))[0]
        if size > 4096:
            raise ConnectionError("a READY command too large")
        _read_exactly(sock, size)
    except BaseException:
        sock.close()
        raise
    return sock


def start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (field 22 of ``/proc/PID/stat``), as the reporter
    reads it; None where there is no ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 1 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


class Reporter:
    """The reports of one process, read from ``env`` once."""

    def __init__(self, env: dict[str, str]) -> None:
        session = env.get(c.SESSION_ENV)
        self._session = session if isinstance(session, str) and _ID.fullmatch(session) else None
        endpoint = env.get(c.HOOK_ENDPOINT_ENV, "")
        self._path = endpoint[len("ipc://") :] if endpoint.startswith("ipc://") else ""
        root_pid = env.get(c.PTY_ROOT_PID_ENV) or ""
        self.launch = {
            "exe": env.get(c.LAUNCH_EXE_ENV) or None,
            "script": env.get(c.LAUNCH_SCRIPT_ENV) or None,
            "root_pid": int(root_pid) if re.fullmatch(r"[0-9]{1,10}", root_pid) and int(root_pid) > 0 else None,
        }
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._pid = 0
        self._counts = dict.fromkeys(c.HOOK_COUNTERS, 0)

    def counters(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def report(self, kind: str, fields: Callable[[], dict[str, Any]]) -> bool:
        with self._lock:
            if self._session is None:
                outcome = "unmanaged"
            else:
                try:
                    outcome = self._send(kind, fields)
                except _Refused:
                    outcome = "refused"
                except OSError:
                    self._drop()
                    outcome = "not_accepted"
                except Exception:
                    self._drop()
                    outcome = "error"
            self._counts[outcome] += 1
        return outcome == "sent"

    def _send(self, kind: str, fields: Callable[[], dict[str, Any]]) -> str:
        body = fields()  # before any socket: a refused report opens nothing
        pid = os.getpid()
        started = start_time(pid)
        if started is None or not self._path:
            return "not_accepted"
        frame = {"v": c.HOOK_VERSION, "kind": kind, "session": self._session, "pid": pid, "start_time": started}
        try:
            raw = pack({**frame, "at": time.time(), **body})
        except (TypeError, UnicodeEncodeError):
            raise _Refused() from None
        if len(raw) > c.MAX_REPORT_BYTES:
            raise _Refused()
        if self._sock is None or self._pid != pid:  # a forked child never writes its parent's stream
            self._sock, self._pid = connect(self._path), pid
        try:
            self._sock.sendall(message(raw))
        except OSError:
            self._drop()  # a frame half written leaves the stream unusable
            raise
        return "sent"

    def _drop(self) -> None:
        if self._sock is not None and self._pid == os.getpid():
            self._sock.close()
        self._sock = None


_default: Reporter | None = None
_default_lock = threading.Lock()


def _client() -> Reporter:
    global _default
    with _default_lock:
        if _default is None:
            _default = Reporter(dict(os.environ))
        return _default


def _one_of(value: object, words: frozenset[str]) -> str:
    if type(value) is not str or value not in words:
        raise _Refused()
    return value


def _id(value: object) -> str:
    if type(value) is not str or not _ID.fullmatch(value):
        raise _Refused()
    return value


def report_native_id(native_id: str, *, resumed: bool = False) -> bool:
    client = _client()
    return client.report(
        "native_id", lambda: {"native_id": _id(native_id), "resumed": resumed is True, "launch": client.launch}
    )


def claim_native_id(native_id: str, *, resumed: bool = False) -> None:
    """Report the native id, trying again briefly while the reporter does not take it: without
    this one report the session can never be resumed."""
    for _ in range(NATIVE_ID_TRIES):
        refused_before = counters()["not_accepted"]
        if report_native_id(native_id, resumed=resumed) or counters()["not_accepted"] == refused_before:
            return
        time.sleep(NATIVE_ID_RETRY_DELAY)


def report_continuation(continuation_ids: Sequence[str]) -> bool:
    def fields() -> dict[str, Any]:
        if isinstance(continuation_ids, str) or not 1 <= len(continuation_ids) <= c.MAX_CONTINUATION_IDS:
            raise _Refused()
        return {"continuation_ids": [_id(i) for i in continuation_ids]}

    return _client().report("continuation", fields)


def report_activity(state: str) -> bool:
    return _client().report("activity", lambda: {"state": _one_of(state, c.ACTIVITY_STATES)})


def report_attention(reason: str = "owner_approval") -> bool:
    return _client().report("attention", lambda: {"reason": _one_of(reason, c.ATTENTION_REASONS)})


def report_release(reason: str) -> bool:
    return _client().report("release", lambda: {"reason": _one_of(reason, c.RELEASE_REASONS)})


def counters() -> dict[str, int]:
    return _client().counters()
