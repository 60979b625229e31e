"""``hermes mesh metrics --listen``: the exposition served over HTTP/1.1 for a Prometheus to
scrape, on a loopback address or a unix socket (``hermes_cli.metrics.address``).

``GET /metrics`` (and ``HEAD``) answers the exposition; any other path 404, any other method
405. One connection is served at a time, one request each (``Connection: close``): its request
must come whole within ``REQUEST_SECONDS`` and ``MAX_REQUEST`` bytes, else it is closed, and
the connections waiting meanwhile queue in the listen backlog (``BACKLOG``), bounded by the
kernel. A scrape gathers at most once per ``CACHE_SECONDS``: a storm of scrapes is one round
of calls to the gateways, not one per scrape. It runs in the foreground until SIGINT or
SIGTERM, then closes its socket and returns.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import socketserver
import stat
import sys
import threading
import time
from collections.abc import Callable

from hermes_cli.errors import CliError
from hermes_cli.metrics.address import ListenAddress
from hermes_cli.metrics.exposition import CONTENT_TYPE
from shared.errors import HermesError

MAX_REQUEST = 8 * 1024
REQUEST_SECONDS = 5.0
CACHE_SECONDS = 2.0
BACKLOG = 16
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


class MetricsListenFailed(CliError):
    """The listener's address could not be bound (taken, or not this user's to bind)."""

    code = "metrics_listen_failed"


class CachedScrape:
    """The latest exposition, gathered again once it is ``CACHE_SECONDS`` old."""

    def __init__(self, scrape: Callable[[], str], clock: Callable[[], float] = time.monotonic) -> None:
        self._scrape, self._clock = scrape, clock
        self._lock = threading.Lock()  # one gathering at a time
        self._body: bytes | None = None
        self._at = 0.0

    def body(self) -> bytes:
        with self._lock:
            if self._body is None or self._clock() - self._at >= CACHE_SECONDS:
                self._body = self._scrape().encode()
                self._at = self._clock()
            return self._body


def _read_head(conn: socket.socket) -> bytes | None:
    """The request's line and headers, or None when they did not come whole in time and size."""
    deadline = time.monotonic() + REQUEST_SECONDS
    data = b""
    while b"\r\n\r\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0 or len(data) > MAX_REQUEST:
            return None
        conn.settimeout(left)
        try:
            chunk = conn.recv(MAX_REQUEST + 1 - len(data))
        except OSError:  # timed out, or reset
            return None
        if not chunk:
            return None
        data += chunk
    return data.split(b"\r\n", 1)[0]


def _answer(line: bytes, cached: CachedScrape) -> tuple[str, dict[str, str], bytes, bool]:
    """(status, headers, body, whether the body is sent) for a request line."""
    parts = line.split()
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        return "400 Bad Request", {"Content-Type": "text/plain"}, b"bad request\n", True
    method, target = parts[0], parts[1].split(b"?", 1)[0]
    if method not in (b"GET", b"HEAD"):
        return "405 Method Not Allowed", {"Allow": "GET, HEAD", "Content-Type": "text/plain"}, b"GET or HEAD\n", True
    if target != b"/metrics":
        return (
            "404 Not Found",
            {"Content-Type": "text/plain"},
            b"not found: the metrics are at /metrics\n",
            method == b"GET",
        )
    return "200 OK", {"Content-Type": CONTENT_TYPE}, cached.body(), method == b"GET"


def _handler(cached: CachedScrape) -> type[socketserver.BaseRequestHandler]:
    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            conn: socket.socket = self.request
            line = _read_head(conn)
            if line is None:
                return
            try:
                status, headers, body, send = _answer(line, cached)
            except HermesError as exc:  # the install could not be read: said, and served on
                status, headers, body, send = (
                    "500 Internal Server Error",
                    {"Content-Type": "text/plain"},
                    f"{exc.message}\n".encode(),
                    True,
                )
            head = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers.items())]
            head += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
            conn.settimeout(REQUEST_SECONDS)
            with contextlib.suppress(OSError):  # a scraper that left: nothing to tell it
                conn.sendall("\r\n".join(head).encode() + (body if send else b""))

    return Handler


class _Quiet:
    def handle_error(self, request: object, client_address: object) -> None:
        """One line on stderr, not the traceback socketserver prints; the listener serves on."""
        print(f"metrics: a scrape failed: {sys.exc_info()[1]!r}", file=sys.stderr, flush=True)


class _TCPServer(_Quiet, socketserver.TCPServer):
    request_queue_size = BACKLOG
    allow_reuse_address = True


class _TCP6Server(_TCPServer):
    address_family = socket.AF_INET6


class _UnixServer(_Quiet, socketserver.UnixStreamServer):
    request_queue_size = BACKLOG


def _bind(address: ListenAddress, cached: CachedScrape) -> socketserver.BaseServer:
    handler = _handler(cached)
    try:
        if address.path is not None:
            _remove_stale_socket(address.path)
            unix = _UnixServer(address.path, handler, bind_and_activate=False)
            old = os.umask(0o177)  # the socket is made 0600: this user's alone
            try:
                unix.server_bind()
            finally:
                os.umask(old)
            unix.server_activate()
            return unix
        kind = _TCP6Server if ":" in (address.host or "") else _TCPServer
        return kind((address.host or "", address.port), handler)
    except OSError as exc:
        raise MetricsListenFailed(
            f"cannot listen on {address.url()}: {exc.strerror or exc}",
            detail={"field": "listen", "errno": exc.errno},
        ) from None


def _remove_stale_socket(path: str) -> None:
    """A socket file nobody answers on (a listener killed before its clean-up) is removed; one
    that answers, or a file that is no socket, is left for the bind to refuse."""
    try:
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            return
    except FileNotFoundError:
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        os.unlink(path)
    except OSError:
        pass
    finally:
        probe.close()


def bound_address(server: socketserver.BaseServer, address: ListenAddress) -> str:
    """Where it listens, the port the kernel chose for port 0 included."""
    if address.path is not None:
        return address.url()
    bound = server.server_address
    assert isinstance(bound, tuple)  # an inet address: (host, port, ...)
    return ListenAddress(str(bound[0]), int(bound[1])).url()


def serve(address: ListenAddress, scrape: Callable[[], str]) -> int:
    """Serve until SIGINT or SIGTERM; 0 then. The signals are taken by this thread alone
    (blocked, then waited for), so a stop never lands in the middle of a scrape."""
    cached = CachedScrape(scrape)
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        server = _bind(address, cached)
        try:
            print(f"serving metrics at {bound_address(server, address)}", file=sys.stderr, flush=True)
            worker = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5}, daemon=True)
            worker.start()
            signal.sigwait(STOP_SIGNALS)
            server.shutdown()  # waits for the request being served, itself bounded
            worker.join(timeout=REQUEST_SECONDS + 30)
        finally:
            server.server_close()
            if address.path is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(address.path)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    return 0
