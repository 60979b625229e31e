"""HS256 JSON Web Tokens (RFC 7519) with the standard library only."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
import re
import time
from typing import Any

_HEADER = {"alg": "HS256", "typ": "JWT"}
# Three base64url segments without padding: anything else is rejected before decoding.
_SHAPE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


# Not a HermesError: the simulated portal's own check; its routes answer it as an HTTP error.
class InvalidToken(Exception):
    pass


def _encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _decode(segment: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
    except (binascii.Error, ValueError):
        raise InvalidToken("bad base64url") from None


def _signature(signing_input: str, key: bytes) -> bytes:
    return hmac.new(key, signing_input.encode("ascii"), hashlib.sha256).digest()


def sign(claims: dict[str, Any], key: bytes) -> str:
    header = _encode(json.dumps(_HEADER, separators=(",", ":")).encode())
    payload = _encode(json.dumps(claims, separators=(",", ":"), allow_nan=False).encode())
    signing_input = f"{header}.{payload}"
    return f"{signing_input}.{_encode(_signature(signing_input, key))}"


def _json_object(segment: str) -> dict[str, Any]:
    try:
        value = json.loads(_decode(segment))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise InvalidToken("segment is not JSON") from None
    if not isinstance(value, dict):
        raise InvalidToken("segment is not a JSON object")
    return value


def verify(token: str, key: bytes, *, now: float | None = None) -> dict[str, Any]:
    """The claims of ``token`` if its signature is ours and it has not expired; else InvalidToken."""
    if not _SHAPE.fullmatch(token):
        raise InvalidToken("not a JWT")
    header, payload, signature = token.split(".")
    if not hmac.compare_digest(_signature(f"{header}.{payload}", key), _decode(signature)):
        raise InvalidToken("bad signature")
    # Only HS256: a token that names another algorithm is not one we issued.
    if _json_object(header).get("alg") != "HS256":
        raise InvalidToken("unexpected algorithm")
    claims = _json_object(payload)
    exp = claims.get("exp")
    if isinstance(exp, bool) or not isinstance(exp, (int, float)) or (isinstance(exp, float) and math.isnan(exp)):
        raise InvalidToken("no usable exp claim")
    if (time.time() if now is None else now) >= exp:
        raise InvalidToken("expired")
    return claims
