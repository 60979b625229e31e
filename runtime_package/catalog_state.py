"""The catalog state the registry persists after an install commits (P): the highest catalog
sequence accepted and every revoked key id seen, so an older or revoked catalog is refused later.

``catalog-state.json`` is ``{"schema": 1, "sequence": N, "revoked_key_ids": [...]}``. Merging
keeps the maximum sequence and the union of ids, so the state only ever grows.
"""

from __future__ import annotations

from runtime_package.registry_errors import PackageRequestInvalid, RegistryUnreadable
from runtime_package.registry_record import SCHEMA, is_count
from runtime_package.store_json import FileRefused, canonical, strict_loads

CatalogState = tuple[int, frozenset[str]]
LIMIT = 1 << 20
_FIELDS = frozenset({"schema", "sequence", "revoked_key_ids"})


def check(value: object) -> CatalogState | None:
    """A caller's ``(sequence, revoked key ids)`` or None; PackageRequestInvalid if malformed."""
    if value is None:
        return None
    if not isinstance(value, tuple) or len(value) != 2:
        raise PackageRequestInvalid("catalog_state")
    sequence, revoked = value
    if not is_count(sequence) or not isinstance(revoked, frozenset) or not all(_key_id_ok(k) for k in revoked):
        raise PackageRequestInvalid("catalog_state")
    return sequence, revoked


def parse(raw: bytes) -> CatalogState:
    try:
        value = strict_loads(raw)
    except FileRefused:
        raise RegistryUnreadable("catalog_state_malformed") from None
    if not isinstance(value, dict) or "schema" not in value:
        raise RegistryUnreadable("catalog_state_malformed")
    if value["schema"] != SCHEMA or isinstance(value["schema"], bool):
        raise RegistryUnreadable("catalog_state_unknown_schema")
    ids = value.get("revoked_key_ids")
    if set(value) != _FIELDS or not is_count(value["sequence"]) or not isinstance(ids, list):
        raise RegistryUnreadable("catalog_state_malformed")
    if not all(_key_id_ok(k) for k in ids) or len(set(ids)) != len(ids):
        raise RegistryUnreadable("catalog_state_malformed")
    return value["sequence"], frozenset(ids)


def merged(current: tuple[int | None, frozenset[str]], wanted: CatalogState) -> bytes | None:
    """The file bytes after accepting ``wanted``, or None when ``current`` already covers it."""
    sequence = wanted[0] if current[0] is None else max(current[0], wanted[0])
    revoked = current[1] | wanted[1]
    if (sequence, revoked) == current:
        return None
    return canonical({"schema": SCHEMA, "sequence": sequence, "revoked_key_ids": sorted(revoked)})


def _key_id_ok(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 256 and value.isascii() and value.isprintable()
