"""One run of the operator CLI (``hermes-operator``), bounded every way: a fixed argv, the
request on stdin, one JSON answer on stdout, a deadline after which its whole process group is
killed, a cap on what it may print, and an environment of nothing but a fixed ``PATH`` and the
locale. Standard library only.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import time
from typing import Any

from .contract import CALL_EXIT_CODES

MAX_ANSWER_BYTES = 8 * 1024 * 1024  # 1 MiB of output as base64 and JSON escapes, and room
MAX_STDERR_BYTES = 4096
EXIT_GRACE = 0.5  # seconds the CLI has to exit once it has answered
_CHUNK = 64 * 1024
_LOCALE = ("LANG", "LC_ALL")


class RunFailed(Exception):
    """The CLI could not give an answer: ``code`` is one of ``pohunek_cli_unavailable`` (not
    runnable), ``pohunek_cli_failed`` (it crashed or broke its exit codes),
    ``pohunek_cli_invalid_envelope`` (its answer is not one JSON object, or too large) and
    ``plugin_tool_timeout`` (the deadline passed)."""

    def __init__(self, code: str):
        super().__init__(code)
        self.code = code


def environment() -> dict[str, str]:
    env = {key: os.environ[key] for key in _LOCALE if key in os.environ}
    env["PATH"] = "/usr/bin:/bin"
    return env


def run(cli: str, argv: list[str], request: bytes, *, timeout: float) -> tuple[int, dict[str, Any]]:
    """The exit code and the JSON answer of ``cli ARGV`` given ``request`` on stdin."""
    try:
        process = subprocess.Popen(
            [cli, *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environment(),
            cwd="/",
            close_fds=True,
            start_new_session=True,  # its own group: a timeout kills whatever it started too
        )
    except OSError:
        raise RunFailed("pohunek_cli_unavailable") from None
    try:
        stdout = _collect(process, request, time.monotonic() + timeout)
        try:
            code = process.wait(timeout=EXIT_GRACE)
        except subprocess.TimeoutExpired:
            raise RunFailed("plugin_tool_timeout") from None
    finally:
        _end(process)
    if code not in CALL_EXIT_CODES:
        raise RunFailed("pohunek_cli_failed")
    try:
        answer = json.loads(stdout.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise RunFailed("pohunek_cli_invalid_envelope") from None
    if type(answer) is not dict or type(answer.get("ok")) is not bool or answer["ok"] != (code == 0):
        raise RunFailed("pohunek_cli_invalid_envelope")
    return code, answer


def _collect(process: subprocess.Popen[bytes], request: bytes, deadline: float) -> bytes:
    """Write the request, read stdout and stderr, all without blocking past ``deadline``."""
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    out, err = bytearray(), bytearray()
    sent = 0
    with selectors.DefaultSelector() as selector:
        for stream, events in ((process.stdin, selectors.EVENT_WRITE), (process.stdout, selectors.EVENT_READ)):
            os.set_blocking(stream.fileno(), False)
            selector.register(stream, events)
        os.set_blocking(process.stderr.fileno(), False)
        selector.register(process.stderr, selectors.EVENT_READ)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RunFailed("plugin_tool_timeout")
            for key, _ in selector.select(remaining):
                if key.fileobj is process.stdin:
                    try:
                        sent += os.write(process.stdin.fileno(), request[sent:])
                    except BrokenPipeError:
                        sent = len(request)  # it stopped reading: its answer says why
                    except BlockingIOError:
                        continue
                    if sent >= len(request):
                        selector.unregister(process.stdin)
                        process.stdin.close()
                    continue
                try:
                    chunk = os.read(key.fd, _CHUNK)
                except BlockingIOError:
                    continue
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                from_stdout = key.fileobj is process.stdout
                target, cap = (out, MAX_ANSWER_BYTES) if from_stdout else (err, MAX_STDERR_BYTES)
                if len(target) + len(chunk) > cap:
                    if from_stdout:
                        raise RunFailed("pohunek_cli_invalid_envelope")
                    continue  # stderr past its cap is dropped, never read into memory
                target.extend(chunk)
    return bytes(out)


def _end(process: subprocess.Popen[bytes]) -> None:
    """Kill the CLI's process group if it still runs, and reap it; close every pipe."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            process.wait(timeout=EXIT_GRACE)
        except subprocess.TimeoutExpired:
            pass
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass
