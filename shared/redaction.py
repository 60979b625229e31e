"""What is a secret, and how it is hidden: the one rule behind every log line, receipt, JSON
document and message a hermes-mesh process writes.

A secret is replaced by ``MARKER``. In a mapping, the value under a secret-looking key goes
whole; in text, what looks like a credential goes: a URL's userinfo and every value of its
query (signed and token URLs carry their secret there), JWTs, ``anon_`` credentials, bearer
and basic values, known provider keys, and ``name=value`` where the name is secret-looking.
In a list, the value after a secret-named flag (``["--token", "X"]``) goes too: that is argv.
Over-redaction is the safe failure: a lost count costs nothing, a leaked credential everything.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

MARKER = "[redacted]"

# A key that merely contains one of these is secret: "token_count" is redacted too.
SECRET_WORDS = (
    "token",
    "secret",
    "password",
    "passwd",
    "credential",
    "api_key",
    "apikey",
    "authorization",
    "cookie",
    "private_key",
)
# "api_key" also matches "api-key", "Api Key" and "X-Api-Key".
_SECRET_WORD = "|".join(word.replace("_", r"[\s_-]?") for word in SECRET_WORDS)
_SECRET_KEY = re.compile(_SECRET_WORD, re.IGNORECASE)
_SECRET_NAME = rf"[A-Za-z0-9_.-]*(?:{_SECRET_WORD})[A-Za-z0-9_.-]*"
_SECRET_FLAG = re.compile(rf"-{{1,2}}{_SECRET_NAME}", re.IGNORECASE)
_B64 = r"[A-Za-z0-9_-]"
_PROVIDER_KEY = (
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|sk-[A-Za-z0-9_-]{16,}"
    r"|xox[abprs]-[\w-]{10,}|glpat-[\w-]{16,})"
)
_HIDDEN = re.escape(MARKER)
# A URL's userinfo, greedy up to the last "@" of the authority (passwords may hold "@"); a user
# name goes too, since a token is as often sent as the user name as the password.
_URL_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/\s'\"<>]+@")
_URL_QUERY = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^?#\s'\"<>]*\?)([^#\s'\"<>]*)")
_TEXT_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # JWTs and any other base64url-encoded JSON ("eyJ" is '{"'), with all their dot parts.
    (re.compile(rf"(?<!{_B64})eyJ{_B64}{{7,}}(?:\.{_B64}*)*"), MARKER),
    (re.compile(r"(?<![A-Za-z0-9_])anon_[A-Za-z0-9_.~+/=-]{16,}"), MARKER),
    # Keys that travel without a telling name: GitHub, OpenAI-style, Slack, GitLab.
    (re.compile(_PROVIDER_KEY), MARKER),
    (re.compile(r"\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+", re.IGNORECASE), rf"\1 {MARKER}"),
    # "API_KEY=...", "password: ...", "--token=..." inside free text (not a value already hidden).
    (
        re.compile(rf"({_SECRET_NAME})(\s*[=:]\s*)(?!{_HIDDEN})(?:\"[^\"]*\"|'[^']*'|[^\s,;]+)", re.IGNORECASE),
        rf"\1\2{MARKER}",
    ),
)


def is_secret_key(key: str) -> bool:
    return _SECRET_KEY.search(key) is not None


def redact_text(text: str) -> str:
    """``text`` with every secret-looking part replaced by ``MARKER``."""
    text = _URL_QUERY.sub(_hide_query_values, _URL_USERINFO.sub(rf"\1{MARKER}@", text))
    for pattern, replacement in _TEXT_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def _hide_query_values(match: re.Match[str]) -> str:
    # The names stay: they say what the URL is ("?sig=[redacted]&expires=[redacted]").
    params = (p.split("=", 1)[0] + "=" + MARKER if "=" in p else MARKER if p else p for p in match[2].split("&"))
    return match[1] + "&".join(params)


def redact(value: Any) -> Any:
    """A deep copy of ``value`` (JSON-like: mappings, lists, tuples, strings, scalars) with every
    secret hidden."""
    if isinstance(value, Mapping):
        return {k: MARKER if isinstance(k, str) and is_secret_key(k) else redact(v) for k, v in value.items()}
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, (list, tuple)):
        out: list[Any] = []
        hide_next = False
        for item in value:
            out.append(MARKER if hide_next else redact(item))
            hide_next = isinstance(item, str) and "=" not in item and _SECRET_FLAG.fullmatch(item) is not None
        return out
    return copy.deepcopy(value)
