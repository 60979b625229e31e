"""The shape of a runtime catalog document and of a trust anchor: every field's type and form.

Reading a document here checks everything that needs no key: the strict JSON, exact field sets
(every object refuses unknown fields), non-negative integers, lowercase hex, digests,
identifiers and the collection limits, which bound the work done before any signature is
checked. What the fields must mean together (signatures, windows, entry rules) is
``catalog``'s. Messages name a field by its place in our schema, never by its content. (P).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from runtime_package import ed25519
from runtime_package.canonical_json import strict_loads
from runtime_package.catalog_errors import CatalogInvalid, TrustUnavailable
from runtime_package.catalog_signing import SCHEMA_VERSION, catalog_message, key_record_message

MAX_ENTRIES = 256
MAX_PLATFORMS = 16
MAX_KEY_RECORDS = 16
MAX_SIGNATURES = 8
MAX_REVOKED_KEYS = 64
MAX_REVOKED_DIGESTS = 1024
MAX_ANCHOR_ROOTS = 8

KEY_ID = re.compile(r"[0-9a-f]{64}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# Pohunek's identifier grammar: [a-z0-9._-], no leading "." or "-", no "..".
PACKAGE_ID = re.compile(r"(?!.*\.\.)[a-z0-9_][a-z0-9._-]{0,127}")
RUNTIME_ID = re.compile(r"(?!.*\.\.)[a-z0-9_][a-z0-9._-]{0,63}")
_PUBLIC_KEY = KEY_ID
_SIGNATURE = re.compile(r"[0-9a-f]{128}")
_VERSION = re.compile(r"[A-Za-z0-9.+_-]{1,64}")


@dataclass(frozen=True)
class AnchorRoot:
    key_id: str
    public_key: bytes
    not_before: int
    not_after: int


@dataclass(frozen=True)
class Anchor:
    roots: tuple[AnchorRoot, ...]
    revoked_key_ids: frozenset[str]


@dataclass(frozen=True)
class CatalogEntry:
    package_id: str
    runtime_id: str
    version: str
    digest: str
    platforms: tuple[str, ...]
    core: str


@dataclass(frozen=True)
class KeyRecord:
    key_id: str
    public_key: bytes
    not_before: int
    not_after: int
    endorsed_by: str
    signature: bytes
    message: bytes  # what the endorsement covers


@dataclass(frozen=True)
class Document:
    message: bytes  # what a catalog signature covers
    sequence: int
    expires_at: int
    revoked_key_ids: frozenset[str]
    revoked_digests: frozenset[str]
    entries: tuple[CatalogEntry, ...]
    key_chain: tuple[KeyRecord, ...]
    signatures: tuple[tuple[str, bytes], ...]  # (key id, signature)


# --- the anchor -------------------------------------------------------------------------------


def parse_anchor(data: bytes) -> Anchor:
    """The trust anchor in ``data``; TrustUnavailable for any fault."""
    try:
        doc = _fields(strict_loads(data), ("schema_version", "roots", "revoked_key_ids"), "anchor")
        _schema_version(doc["schema_version"], "anchor.schema_version")
        roots = _list(doc["roots"], MAX_ANCHOR_ROOTS, "anchor.roots")
        if not roots:
            raise _schema("anchor.roots", "is empty")
        parsed = tuple(_anchor_root(root, f"anchor.roots[{index}]") for index, root in enumerate(roots))
        if len({root.key_id for root in parsed}) != len(parsed):
            raise _schema("anchor.roots", "repeats a key")
        revoked = _key_ids(doc["revoked_key_ids"], "anchor.revoked_key_ids")
    except CatalogInvalid as exc:
        detail = exc.detail or {}
        where = {"field": detail["field"]} if "field" in detail else {}
        raise TrustUnavailable(
            f"the trust anchor is unusable: {exc.message}", "anchor_invalid", cause=exc.reason, **where
        ) from None
    return Anchor(parsed, revoked)


def _anchor_root(value: Any, where: str) -> AnchorRoot:
    root = _fields(value, ("key_id", "public_key", "not_before", "not_after"), where)
    public = bytes.fromhex(_text(root["public_key"], _PUBLIC_KEY, f"{where}.public_key"))
    if not ed25519.is_usable_point(public):
        raise _schema(f"{where}.public_key", "is not a usable Ed25519 key")
    if _text(root["key_id"], KEY_ID, f"{where}.key_id") != ed25519.key_id(public):
        raise _schema(f"{where}.key_id", "is not the id of its public key")
    not_before = _uint(root["not_before"], f"{where}.not_before")
    not_after = _uint(root["not_after"], f"{where}.not_after")
    if not_after <= not_before:
        raise _schema(where, "has an empty validity window")
    return AnchorRoot(root["key_id"], public, not_before, not_after)


# --- the catalog ------------------------------------------------------------------------------


def parse_document(data: bytes) -> Document:
    """The catalog document in ``data``, every field in its form; CatalogInvalid otherwise."""
    doc = _fields(strict_loads(data), ("schema_version", "catalog", "key_chain", "signatures"), "document")
    _schema_version(doc["schema_version"], "schema_version")
    names = ("schema_version", "sequence", "expires_at", "revoked_key_ids", "revoked_digests", "entries")
    body = _fields(doc["catalog"], names, "catalog")
    _schema_version(body["schema_version"], "catalog.schema_version")
    digests = _list(body["revoked_digests"], MAX_REVOKED_DIGESTS, "catalog.revoked_digests")
    entries = _list(body["entries"], MAX_ENTRIES, "catalog.entries")
    chain = _list(doc["key_chain"], MAX_KEY_RECORDS, "key_chain")
    signatures = _list(doc["signatures"], MAX_SIGNATURES, "signatures")
    return Document(
        # The signature covers the member as parsed, not a re-serialization of what we kept.
        message=catalog_message(body),
        sequence=_uint(body["sequence"], "catalog.sequence"),
        expires_at=_uint(body["expires_at"], "catalog.expires_at"),
        revoked_key_ids=_key_ids(body["revoked_key_ids"], "catalog.revoked_key_ids"),
        revoked_digests=frozenset(_text(d, DIGEST, f"catalog.revoked_digests[{i}]") for i, d in enumerate(digests)),
        entries=tuple(_entry(entry, f"catalog.entries[{i}]") for i, entry in enumerate(entries)),
        key_chain=tuple(_record(record, f"key_chain[{i}]") for i, record in enumerate(chain)),
        signatures=tuple(_signature(sig, f"signatures[{i}]") for i, sig in enumerate(signatures)),
    )


def _entry(value: Any, where: str) -> CatalogEntry:
    entry = _fields(value, ("package_id", "runtime_id", "version", "digest", "platforms", "core"), where)
    platforms = _list(entry["platforms"], MAX_PLATFORMS, f"{where}.platforms")
    return CatalogEntry(
        package_id=_text(entry["package_id"], PACKAGE_ID, f"{where}.package_id"),
        runtime_id=_text(entry["runtime_id"], RUNTIME_ID, f"{where}.runtime_id"),
        version=_text(entry["version"], _VERSION, f"{where}.version"),
        digest=_text(entry["digest"], DIGEST, f"{where}.digest"),
        platforms=tuple(_string(name, f"{where}.platforms[{i}]") for i, name in enumerate(platforms)),
        core=_string(entry["core"], f"{where}.core"),
    )


def _record(value: Any, where: str) -> KeyRecord:
    names = ("key_id", "public_key", "not_before", "not_after", "endorsed_by", "signature")
    record = _fields(value, names, where)
    return KeyRecord(
        key_id=_text(record["key_id"], KEY_ID, f"{where}.key_id"),
        public_key=bytes.fromhex(_text(record["public_key"], _PUBLIC_KEY, f"{where}.public_key")),
        not_before=_uint(record["not_before"], f"{where}.not_before"),
        not_after=_uint(record["not_after"], f"{where}.not_after"),
        endorsed_by=_text(record["endorsed_by"], KEY_ID, f"{where}.endorsed_by"),
        signature=bytes.fromhex(_text(record["signature"], _SIGNATURE, f"{where}.signature")),
        message=key_record_message(record),
    )


def _signature(value: Any, where: str) -> tuple[str, bytes]:
    sig = _fields(value, ("key_id", "signature"), where)
    kid = _text(sig["key_id"], KEY_ID, f"{where}.key_id")
    return kid, bytes.fromhex(_text(sig["signature"], _SIGNATURE, f"{where}.signature"))


# --- field helpers ----------------------------------------------------------------------------


def matches(pattern: re.Pattern[str], value: Any) -> bool:
    return isinstance(value, str) and pattern.fullmatch(value) is not None


def _fields(value: Any, names: tuple[str, ...], where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _schema(where, "is not an object")
    if value.keys() != set(names):
        raise _schema(where, "has missing or unknown fields")
    return value


def _list(value: Any, limit: int, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise _schema(where, "is not a list")
    if len(value) > limit:
        raise CatalogInvalid(f"{where} has more than {limit} items", "limit", field=where)
    return value


def _uint(value: Any, where: str) -> int:
    # type() rather than isinstance: a JSON true must not pass for the integer 1.
    if type(value) is not int or value < 0:
        raise _schema(where, "is not a non-negative integer")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _schema(where, "is not a string")
    return value


def _text(value: Any, pattern: re.Pattern[str], where: str) -> str:
    if not matches(pattern, value):
        raise _schema(where, "is not in its required form")
    return value


def _key_ids(value: Any, where: str) -> frozenset[str]:
    items = _list(value, MAX_REVOKED_KEYS, where)
    return frozenset(_text(kid, KEY_ID, f"{where}[{i}]") for i, kid in enumerate(items))


def _schema_version(value: Any, where: str) -> None:
    if _uint(value, where) != SCHEMA_VERSION:
        raise CatalogInvalid(f"{where} is not {SCHEMA_VERSION}", "schema_version", field=where)


def _schema(where: str, problem: str) -> CatalogInvalid:
    return CatalogInvalid(f"{where} {problem}", "schema", field=where)
