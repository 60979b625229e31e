"""A real HTTP server that serves a git repository's branches as source archives.

``GET /<branch>.zip`` and ``GET /<branch>.tar.gz`` answer ``git archive`` of that branch in
``repo`` (with a ``<name>-<branch>/`` top directory, and the commit in the ZIP comment or
the pax header, as the forges do; a query string is ignored). Faults are scheduled per
request: a status with headers, a dropped connection, or a good answer dripped one byte per
interval. Every request is recorded.
"""

from __future__ import annotations

import subprocess
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit


@dataclass
class Fault:
    status: int = 503
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False  # close the connection without an answer
    drip: float | None = None  # answer 200, then send the archive one byte per this many seconds


class ArchiveOrigin:
    def __init__(self, repo: Path):
        self.repo = repo
        self.faults: deque[Fault] = deque()
        self.requests: list[str] = []
        self.before_answer: Callable[[], None] | None = None  # runs just before a good answer
        self.body_override: bytes | None = None
        self.closed = threading.Event()  # ends a drip still running
        origin = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                origin.requests.append(self.path)
                if origin.faults:
                    fault = origin.faults.popleft()
                    if fault.drop:
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                    if fault.drip is not None:
                        self._drip(origin._archive(self.path) or b"", fault.drip)
                        return
                    self.send_response(fault.status)
                    for name, value in {"Content-Length": "0", **fault.headers}.items():
                        self.send_header(name, value)
                    self.end_headers()
                    return
                body = origin.body_override if origin.body_override is not None else origin._archive(self.path)
                if body is None:
                    self.send_error(404)
                    return
                if origin.before_answer:
                    origin.before_answer()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _drip(self, body: bytes, interval: float) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    for i in range(len(body)):
                        self.wfile.write(body[i : i + 1])
                        self.wfile.flush()
                        if origin.closed.wait(interval):
                            return
                except OSError:  # the client gave up
                    self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def url(self, suffix: str = ".zip") -> str:
        return f"{self.base}/{{branch}}{suffix}"

    def _archive(self, path: str) -> bytes | None:
        name = urlsplit(path).path.lstrip("/")
        for suffix, fmt in ((".zip", "zip"), (".tar.gz", "tar.gz")):
            if name.endswith(suffix):
                branch = name[: -len(suffix)]
                done = subprocess.run(
                    [
                        "git",
                        "-C",
                        str(self.repo),
                        "archive",
                        f"--format={fmt}",
                        f"--prefix=hermes-{branch}/",
                        f"refs/heads/{branch}",
                    ],
                    capture_output=True,
                    timeout=60,
                )
                return done.stdout if done.returncode == 0 else None
        return None

    def close(self) -> None:
        self.closed.set()
        self.server.shutdown()
        self.server.server_close()
