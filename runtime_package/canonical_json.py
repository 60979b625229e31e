"""The strict JSON reader and the one canonical byte form that catalog signatures cover.

Signing and verification both go through ``canonical_json``, so a signature covers exactly one
byte sequence per logical document, the same bytes Pohunek's serde_json writer produces: keys
in ascending UTF-8 byte order, no whitespace, only ``"``, ``\\`` and control characters
escaped. ``strict_loads`` accepts a deliberately narrow subset — no duplicate keys, no trailing
data, numbers only as non-negative integers — so no value has a second spelling that could be
smuggled past a signature. (P): bytes in, values out.
"""

from __future__ import annotations

import json
import re
from typing import Any

from runtime_package.catalog_errors import CatalogInvalid

MAX_JSON_BYTES = 2**20
MAX_DEPTH = 32  # a catalog nests four deep; the bound keeps the parser's recursion small
MAX_U64 = 2**64 - 1  # serde_json reads a larger integer as a float, which the catalog refuses

_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_ESCAPES = str.maketrans({**{chr(c): f"\\u{c:04x}" for c in range(0x20)}, **_SHORT_ESCAPES})
_STRING_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


# Not a HermesError: only carries a reason out of the json hooks; its caller raises the typed error.
class _Refused(Exception):
    """Carries a refusal out of the json module's hooks, which wrap nothing they raise."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


# --- canonical bytes --------------------------------------------------------------------------


def canonical_json(value: Any) -> bytes:
    """The canonical UTF-8 bytes of ``value`` (dicts with str keys, lists, str, int, bool, None)."""
    out: list[str] = []
    _write(value, out, 0)
    try:
        return "".join(out).encode("utf-8")
    except UnicodeEncodeError:
        raise _invalid("lone_surrogate") from None


def _write(value: Any, out: list[str], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise _invalid("too_deep")
    if value is None or isinstance(value, bool):
        out.append({None: "null", True: "true", False: "false"}[value])
    elif isinstance(value, int):
        if not -(2**63) <= value <= MAX_U64:
            raise _invalid("integer_out_of_range")
        out.append(str(value))
    elif isinstance(value, str):
        out.append(f'"{value.translate(_ESCAPES)}"')
    elif isinstance(value, list):
        out.append("[")
        for index, item in enumerate(value):
            out.append("," if index else "")
            _write(item, out, depth + 1)
        out.append("]")
    elif isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise _invalid("key_not_string")
        out.append("{")
        for index, key in enumerate(sorted(value, key=_utf8_order)):
            out.append("," if index else "")
            out.append(f'"{key.translate(_ESCAPES)}":')
            _write(value[key], out, depth + 1)
        out.append("}")
    else:
        raise _invalid("unsupported_value")


def _utf8_order(key: str) -> bytes:
    return key.encode("utf-8", "surrogatepass")


# --- strict parse -----------------------------------------------------------------------------


def strict_loads(data: bytes) -> Any:
    """The one JSON value in ``data``; CatalogInvalid for anything outside the strict subset."""
    if not isinstance(data, bytes):
        raise _invalid("not_bytes")
    if len(data) > MAX_JSON_BYTES:
        raise _invalid("too_large")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise _invalid("not_utf8") from None
    _check_depth(text)
    try:
        value = json.loads(
            text,
            object_pairs_hook=_object_without_duplicates,
            parse_int=_non_negative_int,
            parse_float=_refuse_number,
            parse_constant=_refuse_number,
        )
    except _Refused as refused:
        raise _invalid(refused.reason) from None
    except (ValueError, RecursionError):
        # JSONDecodeError (a ValueError) covers syntax and trailing data alike.
        raise _invalid("syntax") from None
    _check_strings(value)
    return value


def _check_depth(text: str) -> None:
    # Counted before parsing, on the text with its strings removed, so a bracket inside a
    # string is not counted and a deep document never reaches the recursive decoder.
    depth = 0
    for bracket in _BRACKET.findall(_STRING_LITERAL.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        if depth > MAX_DEPTH:
            raise _invalid("too_deep")


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _Refused("duplicate_key")
    return out


def _non_negative_int(text: str) -> int:
    if text.startswith("-"):
        raise _Refused("unsupported_number")
    value = int(text)
    if value > MAX_U64:
        raise _Refused("unsupported_number")
    return value


def _refuse_number(_text: str) -> Any:
    raise _Refused("unsupported_number")


def _check_strings(value: Any) -> None:
    # Python's decoder accepts an escaped lone surrogate ("\ud800"); serde_json does not, and
    # such a string has no UTF-8 bytes to sign.
    strings: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            strings.append(item)
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            strings.extend(item)
            stack.extend(item.values())
    try:
        "".join(strings).encode("utf-8")
    except UnicodeEncodeError:
        raise _invalid("lone_surrogate") from None


_MESSAGES = {
    "not_bytes": "the document is not bytes",
    "too_large": f"the document is over {MAX_JSON_BYTES} bytes",
    "not_utf8": "the document is not UTF-8",
    "too_deep": f"the document nests deeper than {MAX_DEPTH} levels",
    "syntax": "the document is not exactly one JSON value",
    "duplicate_key": "an object in the document repeats a key",
    "unsupported_number": "a number in the document is not a non-negative integer below 2**64",
    "lone_surrogate": "a string in the document is not valid Unicode",
    "integer_out_of_range": "an integer is outside the 64-bit range",
    "key_not_string": "an object key is not a string",
    "unsupported_value": "a value is not one JSON can carry canonically",
}


def _invalid(reason: str) -> CatalogInvalid:
    return CatalogInvalid(_MESSAGES[reason], reason)
