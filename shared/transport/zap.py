"""The ZAP handler (RFC 27) of this process: which client keys a CURVE service accepts.

libzmq asks ``inproc://zeromq.zap.01`` of the socket's context about every CURVE handshake.
One daemon thread per process (one zmq context) answers on a REP socket, started by the
first ``register``. Each CURVE service sets its own ``ZAP_DOMAIN``; the registry maps that
domain to the install whose ``authorized/`` directory decides. The directory is read for
every handshake, so a revoked key is refused at its next handshake. An allowed handshake is
answered with a User-Id that names the key itself (``authorized.user_id``): libzmq attaches
it to every message of the connection, and the service refuses the requests of one whose key
is no longer authorized (``shared.transport.authorized``). Every request is validated: a
malformed one gets a 500 (or 400) answer and the thread keeps serving. The log names keys by
their file name only, and says "allowed" at info level once per key and domain (a client may
connect per call).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import zmq
from zmq.utils import z85

from shared.transport import authorized, curve_keys

log = logging.getLogger(__name__)

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
_VERSION = b"1.0"

_lock = threading.Lock()
_domains: dict[str, Path] = {}
_thread: threading.Thread | None = None
# (domain, key name) already logged as allowed at info level: as many as there are key files.
_allowed: set[tuple[bytes, str]] = set()


def register(domain: str, root: Path) -> None:
    """Accept, in ``domain``, the client keys authorized in install ``root``; starts the handler."""
    global _thread
    with _lock:
        _domains[domain] = Path(root)
        if _thread is None:
            sock: zmq.Socket[Any] = zmq.Context.instance().socket(zmq.REP)
            sock.setsockopt(zmq.LINGER, 0)
            sock.bind(ZAP_ENDPOINT)  # bound before the service binds: no handshake goes unanswered
            _thread = threading.Thread(target=_serve, args=(sock,), name="zap", daemon=True)
            _thread.start()


def root_of(domain: str) -> Path | None:
    """The install whose authorized keys ``domain`` accepts; None for a domain not registered."""
    with _lock:
        return _domains.get(domain)


def _serve(sock: zmq.Socket[Any]) -> None:
    while True:
        try:
            parts = sock.recv_multipart()
        except zmq.ContextTerminated:
            return
        with _lock:
            domains = dict(_domains)
        try:
            reply = answer(parts, domains)
        except Exception:  # a handler that dies lets every handshake hang: answer, keep going
            log.exception("zap: failed to judge a request")
            reply = _reply(parts[1] if len(parts) > 1 else b"", b"500", b"internal error")
        try:
            sock.send_multipart(reply)
        except zmq.ContextTerminated:
            return


def _reply(request_id: bytes, status: bytes, text: bytes, user: bytes = b"") -> list[bytes]:
    return [_VERSION, request_id, status, text, user, b""]


def answer(parts: list[bytes], domains: Mapping[str, Path]) -> list[bytes]:
    """The ZAP reply to one request: 200 for a CURVE key authorized in the install that
    ``domains`` maps the request's domain to, else 400 or 500."""
    if len(parts) < 6 or parts[0] != _VERSION:
        return _reply(parts[1] if len(parts) > 1 else b"", b"500", b"malformed ZAP request")
    _, request_id, domain, _address, _identity, mechanism, *credentials = parts
    if len(request_id) > 255:
        return _reply(b"", b"500", b"malformed ZAP request")
    root = domains.get(domain.decode("utf-8", "replace"))
    if root is None:
        log.warning("zap: DENIED a handshake for an unknown domain")
        return _reply(request_id, b"400", b"unknown domain")
    if mechanism != b"CURVE" or len(credentials) != 1 or len(credentials[0]) != 32:
        log.warning("zap: DENIED a %r handshake: only CURVE is accepted", mechanism[:16])
        return _reply(request_id, b"400", b"CURVE only")
    public = z85.encode(credentials[0])
    try:
        keys = curve_keys.public_keys(root, "authorized")
    except curve_keys.CurveKeyUnsafe as exc:
        log.error("zap: DENIED every key: %s", exc.message)
        return _reply(request_id, b"500", b"authorized keys unusable")
    except curve_keys.CurveKeyMissing:
        keys = {}
    for name, key in keys.items():
        if key == public:
            # A client may connect once per call: the first handshake of each key is enough at info.
            level = logging.DEBUG if (domain, name) in _allowed else logging.INFO
            _allowed.add((domain, name))
            log.log(level, "zap: ALLOWED client key %r in %s", name, domain.decode("utf-8", "replace"))
            return _reply(request_id, b"200", b"OK", authorized.user_id(name, key))
    log.warning("zap: DENIED an unknown client key in %s", domain.decode("utf-8", "replace"))
    return _reply(request_id, b"400", b"unknown key")
