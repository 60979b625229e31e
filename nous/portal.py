"""The Nous portal's HTTP API, as this side uses it: device code, token, refresh, model, guest.

Where the portal is (``portal_url``) and how its certificate is checked (``ca_bundle``,
``tls_context``) are read here too. Every answer is checked at the boundary: a JSON map of
bounded size with the fields and types the caller needs, else ``PortalInvalidAnswer``. Every
failure is one of ``nous.portal_errors``. No message ever carries a token: forms are never
echoed, and URLs hold none.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from nous.portal_errors import (
    PortalBusy,
    PortalError,
    PortalInvalidAnswer,
    PortalRefused,
    PortalTLSError,
    PortalUnreachable,
)
from shared.retry_after import retry_after_seconds

DEFAULT_PORTAL_URL = "https://portal.nousresearch.com"
CLIENT_ID = "hermes-cli"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
MAX_ANSWER_BYTES = 64 * 1024
RETRY_AFTER_CAP = 120.0
# Where a CA bundle may be named, first match wins (HERMES_CA_BUNDLE and the usual friends).
CA_BUNDLE_VARS = ("HERMES_CA_BUNDLE", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")


@dataclass(frozen=True)
class DeviceCode:
    device_code: str
    user_code: str
    verification_uri: str
    verification_uri_complete: str
    expires_in: float
    interval: float

    def __repr__(self) -> str:  # the device code is a credential while it lives
        return f"DeviceCode(user_code={self.user_code!r}, expires_in={self.expires_in})"


@dataclass(frozen=True)
class TokenSet:
    access_token: str
    refresh_token: str
    expires_in: float

    def __repr__(self) -> str:
        return f"TokenSet(expires_in={self.expires_in})"


@dataclass(frozen=True)
class GuestIdentity:
    """A free-tier identity the portal registered: ``anon`` is its credential."""

    anon: str
    id: str

    def __repr__(self) -> str:
        return f"GuestIdentity(id={self.id!r})"


def portal_url(value: str | None = None) -> str:
    """The portal's base URL: ``value``, else ``HERMES_PORTAL_URL``, else Nous's own."""
    url = (value or os.environ.get("HERMES_PORTAL_URL") or DEFAULT_PORTAL_URL).rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise PortalError(f"the portal URL must be an http(s) base URL, got {url!r}")
    return url


def ca_bundle(env: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if env is None else env
    return next((env[name] for name in CA_BUNDLE_VARS if env.get(name)), None)


def tls_context(bundle: str | None) -> ssl.SSLContext:
    """The verification to use: the system's trust store, or only ``bundle``. Reads a file:
    call it off the event loop."""
    if bundle is None:
        return ssl.create_default_context()
    if not os.path.isfile(bundle):
        raise PortalTLSError(f"the CA bundle {bundle} does not exist", detail={"ca_bundle": bundle})
    try:
        return ssl.create_default_context(cafile=bundle)
    except (ssl.SSLError, OSError):
        raise PortalTLSError(
            f"the CA bundle {bundle} could not be read as PEM certificates", detail={"ca_bundle": bundle}
        ) from None


class Portal:
    """One portal, one connection pool. Use as ``async with Portal(url, tls) as portal``."""

    def __init__(self, base_url: str, tls: ssl.SSLContext, *, timeout: float = 15.0, client_id: str = CLIENT_ID):
        self.base_url = base_url
        self.client_id = client_id
        self._http = httpx.AsyncClient(
            base_url=base_url,
            verify=tls,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)),
            follow_redirects=False,
        )

    async def __aenter__(self) -> Portal:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._http.aclose()

    async def device_code(self, scope: str = "inference") -> DeviceCode:
        answer = await self._post_form("/api/oauth/device/code", {"client_id": self.client_id, "scope": scope})
        return DeviceCode(
            device_code=_text(answer, "device_code"),
            user_code=_text(answer, "user_code", limit=64),
            verification_uri=_url(answer, "verification_uri"),
            verification_uri_complete=_url(answer, "verification_uri_complete", required=False)
            or _url(answer, "verification_uri"),
            expires_in=_number(answer, "expires_in", low=1, high=24 * 3600),
            interval=_number(answer, "interval", low=0, high=600, default=5),
        )

    async def poll_token(self, device_code: str) -> TokenSet:
        form = {"grant_type": DEVICE_GRANT, "device_code": device_code, "client_id": self.client_id}
        return _token_set(await self._post_form("/api/oauth/token", form))

    async def recommended_default(self, access_token: str) -> str:
        answer = await self._send("GET", "/api/model/recommended-default", bearer=access_token)
        return _text(answer, "model", limit=256)

    async def _post_form(self, path: str, form: dict[str, str]) -> dict[str, Any]:
        return await self._send("POST", path, data=form)

    async def _send(self, method: str, path: str, *, bearer: str | None = None, **kwargs: Any) -> dict[str, Any]:
        try:
            async with self._http.stream(method, path, headers=_headers(bearer), **kwargs) as response:
                body = await _read_capped(response.aiter_bytes())
        except httpx.HTTPError as exc:
            raise _transport_error(exc, self.base_url, method, path) from None
        return _answer(response, body, method, path)


def refresh_blocking(base_url: str, tls: ssl.SSLContext, refresh_token: str, *, timeout: float = 15.0) -> TokenSet:
    """The refresh grant, for a caller that holds the store's file lock in a worker thread
    (a single-use refresh token must be spent and its successor stored under one lock)."""
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": CLIENT_ID}
    return _token_set(send_blocking(base_url, tls, "POST", "/api/oauth/token", data=form, timeout=timeout))


def register_guest_blocking(base_url: str, tls: ssl.SSLContext, *, timeout: float = 15.0) -> GuestIdentity:
    """A new free-tier identity for the install."""
    answer = send_blocking(base_url, tls, "POST", "/api/anonymous/register", timeout=timeout)
    anon, guest_id = answer.get("token"), answer.get("id")
    if not (isinstance(anon, str) and anon.startswith("anon_") and isinstance(guest_id, str)):
        raise PortalInvalidAnswer("the portal's guest answer has no usable token")
    return GuestIdentity(anon=anon, id=guest_id)


def send_blocking(
    base_url: str,
    tls: ssl.SSLContext,
    method: str,
    path: str,
    *,
    bearer: str | None = None,
    timeout: float = 15.0,
    **kwargs: Any,
) -> dict[str, Any]:
    """One request, blocking, checked like every other: the answer's JSON map or a typed error."""
    limits = httpx.Timeout(timeout, connect=min(timeout, 5.0))
    with httpx.Client(base_url=base_url, verify=tls, timeout=limits) as http:
        try:
            with http.stream(method, path, headers=_headers(bearer), **kwargs) as response:
                body = _read_capped_blocking(response.iter_bytes())
        except httpx.HTTPError as exc:
            raise _transport_error(exc, base_url, method, path) from None
    return _answer(response, body, method, path)


def _headers(bearer: str | None) -> dict[str, str]:
    headers = {"Accept": "application/json"}
    if bearer is not None:
        headers["Authorization"] = f"Bearer {bearer}"
    return headers


def _transport_error(exc: httpx.HTTPError, base_url: str, method: str, path: str) -> PortalError:
    if _tls_failure(exc):
        return PortalTLSError(f"the portal's certificate could not be verified ({base_url})")
    why = unreachable_why(exc)
    return PortalUnreachable(f"the portal at {base_url} {PortalUnreachable.WORDS[why]} ({method} {path})", why=why)


def unreachable_why(exc: httpx.HTTPError) -> str:
    """How a request got no answer, as a ``PortalUnreachable`` code: the causes (a trio
    connect's are an exception group) say refused or unresolved; the httpx type says the rest."""
    causes = list(_causes(exc))
    if any(isinstance(cause, ConnectionRefusedError) for cause in causes):
        return PortalUnreachable.CONNECTION_REFUSED
    if any(isinstance(cause, socket.gaierror) for cause in causes):
        return PortalUnreachable.NAME_NOT_RESOLVED
    if isinstance(exc, httpx.TimeoutException):
        return PortalUnreachable.TIMED_OUT
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        return PortalUnreachable.CONNECTION_DROPPED
    return PortalUnreachable.NO_CONNECTION


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, its causes and contexts, and the members of any exception group among them."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [e for e in (current.__cause__, current.__context__) if e is not None]
        if isinstance(current, BaseExceptionGroup):
            todo += list(current.exceptions)


def _answer(response: httpx.Response, body: bytes, method: str, path: str) -> dict[str, Any]:
    """The checked JSON map of a 200 answer; the typed error of any other."""
    status = response.status_code
    if status == 429 or status >= 500:
        wait = retry_after_seconds(response.headers.get("retry-after"), cap=RETRY_AFTER_CAP)
        raise PortalBusy(f"the portal answered HTTP {status} to {method} {path}", status=status, retry_after=wait)
    answer = _json_map(body, status, path)
    if status >= 400:
        error = answer.get("error")
        if not isinstance(error, str) or not error or len(error) > 128:
            raise PortalInvalidAnswer(f"HTTP {status} from {path} without an error code")
        raise PortalRefused(error, status)
    if status != 200:
        raise PortalInvalidAnswer(f"unexpected HTTP {status} from {path}")
    return answer


async def _read_capped(chunks: AsyncIterator[bytes]) -> bytes:
    body = bytearray()
    async for chunk in chunks:
        _append_capped(body, chunk)
    return bytes(body)


def _read_capped_blocking(chunks: Iterator[bytes]) -> bytes:
    body = bytearray()
    for chunk in chunks:
        _append_capped(body, chunk)
    return bytes(body)


def _append_capped(body: bytearray, chunk: bytes) -> None:
    if len(body) + len(chunk) > MAX_ANSWER_BYTES:
        raise PortalInvalidAnswer(f"the portal's answer is over {MAX_ANSWER_BYTES} bytes")
    body += chunk


def _tls_failure(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            return True
        seen = seen.__cause__ or seen.__context__
    return "CERTIFICATE_VERIFY_FAILED" in str(exc)


def _json_map(body: bytes, status: int, path: str) -> dict[str, Any]:
    try:
        answer = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise PortalInvalidAnswer(f"HTTP {status} from {path} is not JSON") from None
    if not isinstance(answer, dict):
        raise PortalInvalidAnswer(f"HTTP {status} from {path} is not a JSON object")
    return answer


def _token_set(answer: dict[str, Any]) -> TokenSet:
    token_type = answer.get("token_type", "Bearer")
    if not isinstance(token_type, str) or token_type.lower() != "bearer":
        raise PortalInvalidAnswer("the token answer is not a Bearer token")
    return TokenSet(
        access_token=_text(answer, "access_token", limit=16 * 1024),
        refresh_token=_text(answer, "refresh_token", limit=4096),
        expires_in=_number(answer, "expires_in", low=1, high=366 * 24 * 3600),
    )


def _text(answer: dict[str, Any], key: str, *, limit: int = 1024) -> str:
    value = answer.get(key)
    if not isinstance(value, str) or not value or len(value) > limit:
        raise PortalInvalidAnswer(f"the portal's answer has no usable {key!r}")
    return value


def _url(answer: dict[str, Any], key: str, *, required: bool = True) -> str:
    if not required and answer.get(key) is None:
        return ""
    value = _text(answer, key, limit=2048)
    if urlsplit(value).scheme not in ("http", "https"):
        raise PortalInvalidAnswer(f"the portal's {key!r} is not an http(s) URL")
    return value


def _number(answer: dict[str, Any], key: str, *, low: float, high: float, default: float | None = None) -> float:
    value = answer.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise PortalInvalidAnswer(f"the portal's {key!r} is missing or out of range")
    return float(value)
