"""HTTP/1.1 with the standard library: framing, body parsing, the request log, fault injection.

Every answer is JSON with a Content-Length, so keep-alive connections stay in step; a request
whose body cannot be framed is answered and its connection closed. Nothing is logged per
request: request lines and bodies carry tokens.
"""

from __future__ import annotations

import json
import re
import socket
import socketserver
import ssl
import sys
import time
import traceback
from contextlib import suppress
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, parse_qsl, urlsplit

from simulators.portal_sim.errors import ApiError, invalid_request
from simulators.portal_sim.faults import Fault
from simulators.portal_sim.routes import CONTROL_PREFIX, FORM, ROUTES, Request
from simulators.portal_sim.state import State

MAX_BODY = 64 * 1024
MAX_DRAIN = 1024 * 1024  # an oversized body up to this size is read and dropped, keeping the connection
MAX_FORM_FIELDS = 100
IDLE_TIMEOUT = 60.0  # seconds a connection may sit idle, or in its TLS handshake, before it is closed
FORM_TYPE = "application/x-www-form-urlencoded"
_LENGTH = re.compile(r"[0-9]{1,15}")


class PortalServer(ThreadingHTTPServer):
    daemon_threads = True  # a stuck connection never holds up shutdown

    def __init__(
        self, host: str, port: int, *, ssl_context: ssl.SSLContext | None = None, state_path: Path | None = None
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, port), Handler)
        try:
            if ssl_context is not None:
                # Handshakes run in each connection's own thread (Handler.handle), never in the accept loop.
                self.socket = ssl_context.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)
            name = f"[{host}]" if ":" in host else host
            self.base = f"{'https' if ssl_context else 'http'}://{name}:{self.server_address[1]}"
            self.state = State(self.base, state_path)
        except BaseException:
            self.server_close()
            raise

    def server_bind(self) -> None:
        # HTTPServer.server_bind would look up the host's FQDN, which can hang on reverse DNS.
        socketserver.TCPServer.server_bind(self)
        self.server_port = self.server_address[1]

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            return  # a client that vanished or broke TLS loses only its own connection
        print(f"portal_sim: connection failed: {type(exc).__name__}", file=sys.stderr, flush=True)


def parse_form(raw: bytes) -> dict[str, str]:
    pairs = parse_qsl(
        raw.decode("utf-8"),
        keep_blank_values=True,
        strict_parsing=True,
        errors="strict",
        max_num_fields=MAX_FORM_FIELDS,
    )
    form = dict(pairs)
    if len(form) != len(pairs):
        raise ValueError("a field is repeated")  # RFC 6749 3.2: parameters appear at most once
    return form


def parse_json(raw: bytes) -> Any:
    def reject(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(raw.decode("utf-8"), parse_constant=reject)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT
    disable_nagle_algorithm = True  # headers and body go out as two writes; don't let them wait on ACKs
    server: PortalServer

    def handle(self) -> None:
        if isinstance(self.connection, ssl.SSLSocket):
            try:
                self.connection.do_handshake()
            except OSError:  # ssl.SSLError included
                return
        super().handle()

    def do_GET(self) -> None:
        self._serve()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET  # noqa: N815 (http.server's names)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's signature)
        pass  # request lines can carry tokens

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # http.server's own rejections (bad request line, oversized headers, unknown method): JSON too.
        phrase = HTTPStatus(code).phrase.lower().replace(" ", "_").replace("-", "_")
        error = "invalid_request" if code == 400 else phrase
        self.close_connection = True
        self._send_json(code, ApiError(code, error, message or "").body(), {"Connection": "close"})

    # --- one request ------------------------------------------------------------------------------

    def _serve(self) -> None:
        url = urlsplit(self.path)
        try:
            raw = self._read_body()
            if not url.path.startswith(CONTROL_PREFIX):
                self._record(url.path, raw)
                fault = self.server.state.take_fault(self.command, url.path)
                if fault is not None and self._suffer(fault):
                    return
            status, payload, headers = 200, self._dispatch(url, raw), {}
        except ApiError as exc:
            status, payload, headers = exc.status, exc.body(), exc.headers
        except (ConnectionError, TimeoutError, ssl.SSLError):
            self.close_connection = True  # the client left or stalled mid-request
            return
        except Exception as exc:  # a bug answers 500 and the server keeps serving
            trace = "".join(traceback.format_tb(exc.__traceback__))
            # Only the exception's type: its message could quote a token.
            print(f"portal_sim: {self.command} {url.path}: {type(exc).__name__}\n{trace}", file=sys.stderr, flush=True)
            status, payload, headers = 500, ApiError(500, "server_error").body(), {}
        self._send_json(status, payload, headers)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise ApiError(411, "length_required", "send a Content-Length", headers={"Connection": "close"})
        text = self.headers.get("Content-Length")
        if text is None:
            return b""
        if not _LENGTH.fullmatch(text.strip()):
            self.close_connection = True
            raise ApiError(400, "invalid_request", "bad Content-Length", headers={"Connection": "close"})
        length = int(text)
        if length > MAX_BODY:
            too_large = ApiError(413, "request_too_large", f"bodies are limited to {MAX_BODY} bytes")
            if length > MAX_DRAIN:
                self.close_connection = True
                too_large.headers["Connection"] = "close"
            else:
                # Closing with unread bytes would reset the connection before the client reads the 413.
                self._read_exactly(length)
            raise too_large
        return self._read_exactly(length)

    def _read_exactly(self, length: int) -> bytes:
        raw = self.rfile.read(length)
        if len(raw) < length:
            raise ConnectionResetError("the client closed the connection mid-body")
        return raw

    def _record(self, path: str, raw: bytes) -> None:
        entry: dict[str, Any] = {
            "method": self.command,
            "path": path,
            "authorization": "Authorization" in self.headers,
            "time": time.time(),
        }
        content_type = self.headers.get_content_type()
        with suppress(ValueError, RecursionError):  # a malformed body is logged without it
            if content_type == FORM_TYPE:
                entry["form"] = parse_form(raw)
            elif raw and (content_type == "application/json" or content_type.endswith("+json")):
                entry["json"] = parse_json(raw)
        self.server.state.record(entry)

    def _suffer(self, fault: Fault) -> bool:
        """Apply ``fault``; True when it took the place of the normal answer."""
        time.sleep(fault.delay)
        if fault.drop:
            self.close_connection = True
            with suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return True
        if fault.status is not None:
            self._send_json(fault.status, fault.body, fault.headers)
            return True
        return False

    def _dispatch(self, url: SplitResult, raw: bytes) -> dict[str, Any]:
        methods = ROUTES.get(url.path)
        if methods is None:
            raise ApiError(404, "not_found", "no such endpoint")
        route = methods.get(self.command)
        if route is None:
            raise ApiError(405, "method_not_allowed", headers={"Allow": ", ".join(methods)})
        endpoint, kind = route
        body = None if kind is None else self._body(kind, raw)
        request = Request(self.command, url.path, url.query, self.headers.get("Authorization"), body)
        return endpoint(self.server.state, request)

    def _body(self, kind: str, raw: bytes) -> dict[str, Any]:
        try:
            if kind == FORM:
                if self.headers.get_content_type() != FORM_TYPE:
                    raise ValueError(f"expected {FORM_TYPE}")
                return parse_form(raw)
            # JSON routes are lenient about Content-Type (curl -d sends a form type) and take no body as {}.
            value = parse_json(raw) if raw.strip() else {}
        except (ValueError, RecursionError) as exc:
            raise invalid_request(f"malformed body: {exc}") from None
        if not isinstance(value, dict):
            raise invalid_request("the body must be a JSON object")
        return value

    def _send_json(self, status: int, payload: Any, headers: dict[str, str]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        given = {name.lower() for name in headers}
        for name, value in {"Content-Type": "application/json", "Cache-Control": "no-store"}.items():
            if name.lower() not in given:
                self.send_header(name, value)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
