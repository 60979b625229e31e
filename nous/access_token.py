"""Reading the claims of an access token the portal issued.

The portal signs its tokens with a key only it holds, so this side cannot check the
signature; it reads the claims it needs (who, which tier, until when, which host) and
refuses a token whose claims are missing or ill-typed. Trust comes from TLS to the portal.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from nous.errors import NousError

MAX_TOKEN_LENGTH = 16 * 1024
MAX_TEXT_CLAIM = 512
TIERS = frozenset({"free", "plus", "pro"})


class InvalidAccessToken(NousError):
    code = "invalid_token"


@dataclass(frozen=True)
class Claims:
    sub: str
    email: str
    tier: str
    host: str
    exp: float


def read_claims(token: object) -> Claims:
    """The claims of ``token``; ``InvalidAccessToken`` (whose message never quotes the token)."""
    if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_LENGTH:
        raise InvalidAccessToken("the access token is missing or too long")
    parts = token.split(".")
    if len(parts) != 3:
        raise InvalidAccessToken("the access token is not a JWT")
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise InvalidAccessToken("the access token's claims are not readable") from None
    if not isinstance(payload, dict):
        raise InvalidAccessToken("the access token's claims are not a map")
    sub, email, host = (_text_claim(payload, name) for name in ("sub", "email", "host"))
    tier, exp = payload.get("tier"), payload.get("exp")
    if tier not in TIERS:
        raise InvalidAccessToken("the access token names no known tier")
    if isinstance(exp, bool) or not isinstance(exp, (int, float)):
        raise InvalidAccessToken("the access token has no expiry")
    if not host.startswith(("https://", "http://")):
        raise InvalidAccessToken("the access token's host is not an http(s) URL")
    return Claims(sub=sub, email=email, tier=tier, host=host, exp=float(exp))


def _text_claim(payload: dict[str, Any], name: str) -> str:
    value = payload.get(name)
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT_CLAIM:
        raise InvalidAccessToken(f"the access token has no usable {name!r} claim")
    return value
