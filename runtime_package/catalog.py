"""The signed runtime catalog: the only way a package becomes an official Hermes runtime.

A catalog (Pohunek's ``runtime-catalog.json``, verbatim) binds each package archive digest to a
package id, runtime id, version, platforms and a core version range, and is signed with
Ed25519 by a key that chains to a root of the caller's trust anchor. ``verify`` checks in the
order TUF's bugs taught — parse fully, then signatures and lineage, then expiry, then rollback,
then entries — and persists nothing: the registry records the new high-water mark only once an
install has committed. This module holds the trust rules; the document's shape, the strict
JSON, the key checks and the signing writers live beside it and are re-exported here.
(P): the caller passes the bytes and ``now``; only ``host_platform`` reads the host.
"""

from __future__ import annotations

import platform
import re
import sys
from dataclasses import dataclass

from runtime_package import ed25519
from runtime_package.canonical_json import MAX_JSON_BYTES, canonical_json, strict_loads
from runtime_package.catalog_document import (
    DIGEST,
    KEY_ID,
    RUNTIME_ID,
    Anchor,
    AnchorRoot,
    CatalogEntry,
    Document,
    KeyRecord,
    matches,
    parse_anchor,
    parse_document,
)
from runtime_package.catalog_errors import (
    CatalogError,
    CatalogExpired,
    CatalogInvalid,
    CatalogRollback,
    CatalogUntrusted,
    NotAuthorized,
    TrustUnavailable,
)
from runtime_package.catalog_signing import CATALOG_DOMAIN, KEY_RECORD_DOMAIN, anchor_document, key_record, sign_catalog
from runtime_package.core_range import in_range, parse_range, parse_version
from runtime_package.ed25519 import key_id

__all__ = [
    "CATALOG_DOMAIN",
    "KEY_RECORD_DOMAIN",
    "MAX_CATALOG_BYTES",
    "RESERVED_RUNTIMES",
    "Anchor",
    "AnchorRoot",
    "CatalogEntry",
    "CatalogError",
    "CatalogExpired",
    "CatalogInvalid",
    "CatalogRollback",
    "CatalogUntrusted",
    "NotAuthorized",
    "TrustUnavailable",
    "VerifiedCatalog",
    "anchor_document",
    "canonical_json",
    "explicit_digest_allows",
    "host_platform",
    "key_id",
    "key_record",
    "parse_anchor",
    "sign_catalog",
    "strict_loads",
    "verify",
]

MAX_CATALOG_BYTES = MAX_JSON_BYTES
# Only a catalog authorizes these; "shell" is the built-in runtime, which nothing authorizes.
RESERVED_RUNTIMES = frozenset({"shell", "codex", "claude", "hermes"})
SHELL = "shell"
_PLATFORM = re.compile(r"[a-z0-9._-]{1,64}")


@dataclass(frozen=True)
class VerifiedCatalog:
    sequence: int
    expires_at: int
    entries: tuple[CatalogEntry, ...]
    revoked_key_ids: frozenset[str]
    revoked_digests: frozenset[str]

    def authorize(
        self, package_id: str, runtime_id: str, digest: str, *, platform: str, core_version: str
    ) -> CatalogEntry:
        """The entry that makes this archive an official package on this host, else NotAuthorized."""
        if runtime_id == SHELL:
            raise NotAuthorized("no catalog authorizes the shell runtime", "reserved_shell")
        entry = self.listing(digest)
        if (entry.package_id, entry.runtime_id) != (package_id, runtime_id):
            raise NotAuthorized("no catalog entry names this package, runtime and archive digest", "no_entry")
        if platform not in entry.platforms:
            raise NotAuthorized("the catalog entry does not list this host's platform", "platform")
        core = parse_version(core_version)
        if core is None or not in_range(core, parse_range(entry.core) or ()):
            raise NotAuthorized("the catalog entry's core range does not contain this core version", "core_version")
        return entry

    def listing(self, digest: str) -> CatalogEntry:
        """The entry naming this archive digest, else NotAuthorized: what an install asks of the
        raw archive's digest before it decompresses a byte."""
        if digest in self.revoked_digests:
            raise NotAuthorized("the catalog revokes this archive digest", "digest_revoked")
        # Digests are unique within a verified catalog, so at most one entry matches.
        entry = next((e for e in self.entries if e.digest == digest), None)
        if entry is None:
            raise NotAuthorized("no catalog entry names this package, runtime and archive digest", "no_entry")
        return entry


def explicit_digest_allows(runtime_id: str, digest: str, trusted_digest: str) -> bool:
    """Whether an owner-supplied digest trusts this archive: never for a reserved runtime id."""
    return (
        matches(RUNTIME_ID, runtime_id)
        and runtime_id not in RESERVED_RUNTIMES
        and matches(DIGEST, digest)
        and digest == trusted_digest
    )


def host_platform() -> str:
    """This host's target triple, as a catalog entry's ``platforms`` names it."""
    machine = platform.machine().lower()
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    if sys.platform == "darwin":
        return f"{arch}-apple-darwin"
    if sys.platform.startswith("linux"):
        libc, _version = platform.libc_ver()
        return f"{arch}-unknown-linux-{'gnu' if libc == 'glibc' else 'musl'}"
    return f"{arch}-unknown-{sys.platform}"


def verify(
    data: bytes, anchor: Anchor, *, now: int, high_water: int | None, revoked_key_ids: frozenset[str] = frozenset()
) -> VerifiedCatalog:
    """The catalog in ``data`` once every rule holds at ``now``; the first broken rule raises.

    ``high_water`` is the highest sequence accepted before (None: none yet); an equal sequence
    passes so an installed catalog can be verified again. ``revoked_key_ids`` are the key ids
    earlier catalogs revoked, which the caller keeps beside the high-water mark.
    """
    external = _recorded_revocations(high_water, revoked_key_ids) | anchor.revoked_key_ids
    doc = parse_document(data)
    keys = _key_set(doc.key_chain, anchor)
    _check_signatures(doc, keys, external, now)
    if now >= doc.expires_at:
        raise CatalogExpired("the catalog has expired", "expired")
    if high_water is not None and doc.sequence < high_water:
        raise CatalogRollback(
            "the catalog is older than one accepted before", "rollback", sequence=doc.sequence, high_water=high_water
        )
    _check_entries(doc.entries, doc.revoked_digests)
    return VerifiedCatalog(doc.sequence, doc.expires_at, doc.entries, doc.revoked_key_ids, doc.revoked_digests)


def _recorded_revocations(high_water: int | None, revoked_key_ids: frozenset[str]) -> frozenset[str]:
    # These come from the registry's state file: checked like any other input.
    if high_water is not None and (type(high_water) is not int or high_water < 0):
        raise TrustUnavailable("the recorded high-water mark is not a non-negative integer", "high_water_invalid")
    if not isinstance(revoked_key_ids, frozenset) or not all(matches(KEY_ID, kid) for kid in revoked_key_ids):
        raise TrustUnavailable("the recorded revoked key ids are not key ids", "revoked_key_ids_invalid")
    return revoked_key_ids


@dataclass(frozen=True)
class _Key:
    public_key: bytes
    not_before: int
    not_after: int
    lineage: tuple[str, ...]  # this key's id, then each endorser's up to a root


def _key_set(chain: tuple[KeyRecord, ...], anchor: Anchor) -> dict[str, _Key]:
    """Every key this catalog may be signed with: the roots, then each record once its endorser
    (a root or an earlier record) has verified it."""
    keys = {
        root.key_id: _Key(root.public_key, root.not_before, root.not_after, (root.key_id,)) for root in anchor.roots
    }
    for index, record in enumerate(chain):
        where = f"key_chain[{index}]"
        if not ed25519.is_usable_point(record.public_key):
            raise _invalid_record(f"{where}.public_key", "is not a usable Ed25519 key")
        if record.key_id != key_id(record.public_key):
            raise _invalid_record(f"{where}.key_id", "is not the id of its public key")
        if record.key_id in keys:
            raise _invalid_record(f"{where}.key_id", "names a key already in the anchor or the chain")
        if record.not_after <= record.not_before:
            raise _invalid_record(where, "has an empty validity window")
        endorser = keys.get(record.endorsed_by)
        if endorser is None:
            raise CatalogUntrusted(
                f"key record {index} is endorsed by neither a root nor an earlier record",
                "unknown_endorser",
                index=index,
            )
        if not ed25519.verify(endorser.public_key, record.signature, record.message):
            raise CatalogUntrusted(f"key record {index}'s endorsement does not verify", "bad_endorsement", index=index)
        lineage = (record.key_id, *endorser.lineage)
        keys[record.key_id] = _Key(record.public_key, record.not_before, record.not_after, lineage)
    return keys


def _invalid_record(where: str, problem: str) -> CatalogInvalid:
    return CatalogInvalid(f"{where} {problem}", "schema", field=where)


_SIGNER_FAULTS = {
    "unknown_signer": "its key is neither a root nor in the key chain",
    "signer_revoked": "its key or one it chains from is revoked",
    "signer_revoked_by_catalog": "the catalog revokes its own signing key or one it chains from",
    "signer_not_yet_valid": "its key or one it chains from is not valid yet",
    "signer_expired": "its key or one it chains from has expired",
    "bad_signature": "it does not verify over the catalog",
}


def _check_signatures(doc: Document, keys: dict[str, _Key], external: frozenset[str], now: int) -> None:
    """At least one signature verifies from a key whose whole lineage is valid now and unrevoked."""
    if not doc.signatures:
        raise CatalogUntrusted("the catalog carries no signature", "no_signatures")
    if len({kid for kid, _signature in doc.signatures}) != len(doc.signatures):
        raise CatalogInvalid("signatures repeat a key id", "schema", field="signatures")
    faults = [_signer_fault(kid, signature, doc, keys, external, now) for kid, signature in doc.signatures]
    if None in faults:
        return
    index, reason = next((i, fault) for i, fault in enumerate(faults) if fault is not None)
    raise CatalogUntrusted(
        f"no signature verifies from a trusted key (signature {index}: {_SIGNER_FAULTS[reason]})", reason, index=index
    )


def _signer_fault(
    kid: str, signature: bytes, doc: Document, keys: dict[str, _Key], external: frozenset[str], now: int
) -> str | None:
    signer = keys.get(kid)
    if signer is None:
        return "unknown_signer"
    for ancestor_id in signer.lineage:
        if ancestor_id in external:
            return "signer_revoked"
        if ancestor_id in doc.revoked_key_ids:
            return "signer_revoked_by_catalog"
        ancestor = keys[ancestor_id]
        if now < ancestor.not_before:
            return "signer_not_yet_valid"
        if now >= ancestor.not_after:
            return "signer_expired"
    return None if ed25519.verify(signer.public_key, signature, doc.message) else "bad_signature"


_ENTRY_FAULTS = {
    "reserved_shell": "names the shell runtime, which no package provides",
    "platforms": "has an empty, repeated or malformed platform list",
    "core_range": "has a core range that is not a list of comparators",
    "duplicate_version": "repeats a package id and version",
    "duplicate_digest": "repeats an archive digest",
    "identity_conflict": "pairs a runtime id and a package id that other entries pair differently",
    "revoked_digest": "names a digest the catalog revokes",
}


def _check_entries(entries: tuple[CatalogEntry, ...], revoked_digests: frozenset[str]) -> None:
    versions: set[tuple[str, str]] = set()
    digests: set[str] = set()
    package_of: dict[str, str] = {}  # runtime id -> the one package id that provides it
    runtime_of: dict[str, str] = {}  # package id -> the one runtime id it provides
    for index, entry in enumerate(entries):
        fault = _entry_fault(entry, versions, digests, package_of, runtime_of, revoked_digests)
        if fault is not None:
            raise CatalogInvalid(
                f"catalog entry {index} {_ENTRY_FAULTS[fault]}", "entry_invalid", index=index, rule=fault
            )
        versions.add((entry.package_id, entry.version))
        digests.add(entry.digest)


def _entry_fault(
    entry: CatalogEntry,
    versions: set[tuple[str, str]],
    digests: set[str],
    package_of: dict[str, str],
    runtime_of: dict[str, str],
    revoked_digests: frozenset[str],
) -> str | None:
    if entry.runtime_id == SHELL:
        return "reserved_shell"
    if not entry.platforms or len(set(entry.platforms)) != len(entry.platforms):
        return "platforms"
    if not all(_PLATFORM.fullmatch(name) for name in entry.platforms):
        return "platforms"
    if parse_range(entry.core) is None:
        return "core_range"
    if (entry.package_id, entry.version) in versions:
        return "duplicate_version"
    if entry.digest in digests:
        return "duplicate_digest"
    if package_of.setdefault(entry.runtime_id, entry.package_id) != entry.package_id:
        return "identity_conflict"
    if runtime_of.setdefault(entry.package_id, entry.runtime_id) != entry.runtime_id:
        return "identity_conflict"
    if entry.digest in revoked_digests:
        return "revoked_digest"
    return None
