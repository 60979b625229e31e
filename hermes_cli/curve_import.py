"""Reading the service keys another install publishes, to trust them all at once.

``hermes mesh keys show --json`` on one install prints its services' public keys under
``"services"``; ``hermes mesh keys authorize --server --from FILE`` on another install reads
that document to trust every one of them. The document comes from elsewhere, so everything in
it is checked before anything is written, and an error names a bad entry by its position only:
its name and key are never echoed. Pure: the caller reads the bytes.
"""

from __future__ import annotations

import json
from typing import Any

from shared.transport import curve_keys

MAX_DOCUMENT_BYTES = 64 * 1024


def services_of(raw: bytes) -> dict[str, bytes]:
    """Service key name -> public key, from a ``hermes mesh keys show --json`` document.

    curve_keys.CurveKeyInvalid when the document is too large, is not a JSON object, has no mapping of
    services, names none, or has an entry whose name or key is not valid."""
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise curve_keys.CurveKeyInvalid(
            f"the keys document is larger than {MAX_DOCUMENT_BYTES // 1024} KiB", detail={"bytes": len(raw)}
        )
    document = _json(raw)
    if not isinstance(document, dict):
        raise curve_keys.CurveKeyInvalid(
            "the keys document is not a JSON object (expected `hermes mesh keys show --json`)"
        )
    services = document.get("services")
    if not isinstance(services, dict):
        raise curve_keys.CurveKeyInvalid('the keys document has no "services" mapping of NAME: KEY')
    if not services:
        raise curve_keys.CurveKeyInvalid('the keys document\'s "services" names no service')
    keys: dict[str, bytes] = {}
    for position, (name, key) in enumerate(services.items(), start=1):
        if not isinstance(name, str) or not curve_keys.NAME_RE.fullmatch(name):
            raise _bad_entry(position, "name")
        try:
            keys[name] = curve_keys.validate_key(key)
        except curve_keys.CurveKeyInvalid:
            raise _bad_entry(position, "key") from None
    return keys


def ports_of(raw: bytes) -> dict[str, int]:
    """Service key name -> the control port it binds on TCP, from the same document's
    ``"ports"`` (absent: {}); called after ``services_of`` accepted the document."""
    ports = _json(raw).get("ports") or {}
    if not isinstance(ports, dict):
        raise curve_keys.CurveKeyInvalid('the keys document\'s "ports" is not a mapping of NAME: PORT')
    found: dict[str, int] = {}
    for position, (name, port) in enumerate(ports.items(), start=1):
        if not isinstance(name, str) or not curve_keys.NAME_RE.fullmatch(name):
            raise _bad_entry(position, "name", "ports")
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65534:
            raise _bad_entry(position, "port", "ports")
        found[name] = port
    return found


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise curve_keys.CurveKeyInvalid(
            "the keys document is not JSON (expected `hermes mesh keys show --json`)"
        ) from None


def _bad_entry(position: int, what: str, section: str = "services") -> curve_keys.CurveKeyInvalid:
    return curve_keys.CurveKeyInvalid(
        f'entry {position} of the keys document\'s "{section}" has an invalid {what}',
        detail={"entry": position, "field": what},
    )
