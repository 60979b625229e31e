"""Scheduled faults: what ``POST /_sim/faults`` asks the next matching requests to suffer."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from simulators.portal_sim.errors import invalid_request

MAX_DELAY = 30.0
MAX_COUNT = 10_000
_METHOD = re.compile(r"[A-Z]{1,16}")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an RFC 9110 token
# The server frames every answer itself; a fault may not break that framing.
_FRAMING_HEADERS = {"content-length", "transfer-encoding", "connection"}
_BODILESS = {204, 205, 304}  # every fault answer carries a JSON body
_KEYS = {"path", "method", "status", "headers", "body", "delay", "drop", "count"}


@dataclass(frozen=True)
class Fault:
    status: int | None = None  # None: answer normally (after the delay)
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    delay: float = 0.0
    drop: bool = False  # close the connection without an answer


def parse(spec: dict[str, Any]) -> tuple[str, str, int, Fault]:
    """``(method, path, count, fault)`` from a fault request, or ApiError 400."""
    unknown = sorted(set(spec) - _KEYS)
    if unknown:
        raise invalid_request(f"unknown fault fields: {', '.join(unknown)}")
    path = spec.get("path")
    if not isinstance(path, str) or not path.startswith("/") or path.startswith("/_sim/"):
        raise invalid_request("path must be an absolute path outside /_sim/")
    method = spec.get("method", "POST")
    if not isinstance(method, str) or not _METHOD.fullmatch(method):
        raise invalid_request("method must be an upper-case HTTP method")
    count = spec.get("count", 1)
    if not _is_int(count) or not 1 <= count <= MAX_COUNT:
        raise invalid_request(f"count must be an integer from 1 to {MAX_COUNT}")
    delay = spec.get("delay", 0.0)
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not 0 <= delay <= MAX_DELAY:
        raise invalid_request(f"delay must be a number of seconds from 0 to {MAX_DELAY:g}")
    drop = spec.get("drop", False)
    if not isinstance(drop, bool):
        raise invalid_request("drop must be a boolean")
    status = spec.get("status")
    if status is not None and (not _is_int(status) or not 200 <= status <= 599 or status in _BODILESS):
        raise invalid_request("status must be an integer from 200 to 599 that allows a body")
    headers = spec.get("headers", {})
    if not isinstance(headers, dict) or not all(_is_header(name, value) for name, value in headers.items()):
        raise invalid_request("headers must map header names to printable ASCII values")
    if status is None and ("headers" in spec or "body" in spec):
        raise invalid_request("headers and body need a status")
    if drop and status is not None:
        raise invalid_request("a fault either drops the connection or answers a status")
    if not drop and status is None and delay == 0:
        raise invalid_request("a fault needs a status, a delay or drop")
    body = spec["body"] if "body" in spec else {"error": "simulated"}
    return method, path, count, Fault(status=status, headers=headers, body=body, delay=float(delay), drop=drop)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_header(name: Any, value: Any) -> bool:
    return (
        isinstance(name, str)
        and bool(_HEADER_NAME.fullmatch(name))
        and name.lower() not in _FRAMING_HEADERS
        and isinstance(value, str)
        and all(" " <= c <= "~" or c == "\t" for c in value)  # no line breaks, nothing http.server can't encode
    )
