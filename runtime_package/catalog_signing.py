"""What a catalog signature and a key-record endorsement cover, and the writers that sign them.

The domain prefixes keep one kind of signature from being replayed as the other. The writers
serve ``scripts/sign_catalog.py`` and the tests; they check only that the value has canonical
bytes, so a test can sign a catalog the verifier must refuse. (P): keys and values in, bytes out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from runtime_package import ed25519
from runtime_package.canonical_json import canonical_json

CATALOG_DOMAIN = b"pohunek-runtime-catalog-v1\n"
KEY_RECORD_DOMAIN = b"pohunek-catalog-key-record-v1\n"
SCHEMA_VERSION = 1


def catalog_message(catalog: Any) -> bytes:
    """The bytes a catalog signature covers: the domain, then the ``catalog`` member's canonical JSON."""
    return CATALOG_DOMAIN + canonical_json(catalog)


def key_record_message(record: Mapping[str, Any]) -> bytes:
    """The bytes an endorsement covers: the domain, then the record without its ``signature``."""
    return KEY_RECORD_DOMAIN + canonical_json({name: value for name, value in record.items() if name != "signature"})


def sign_catalog(
    catalog: Mapping[str, Any], signer_seed: ed25519.PrivateKeyLike, *, key_chain: Sequence[Mapping[str, Any]] = ()
) -> bytes:
    """The whole ``runtime-catalog.json`` document: ``catalog`` signed by one key, with ``key_chain``."""
    body = dict(catalog)
    signature = ed25519.sign(signer_seed, catalog_message(body))
    document = {
        "schema_version": SCHEMA_VERSION,
        "catalog": body,
        "key_chain": [dict(record) for record in key_chain],
        "signatures": [{"key_id": ed25519.key_id(ed25519.public_bytes(signer_seed)), "signature": signature.hex()}],
    }
    return canonical_json(document) + b"\n"


def key_record(
    new_public: bytes, not_before: int, not_after: int, endorser_seed: ed25519.PrivateKeyLike
) -> dict[str, Any]:
    """A key-chain record introducing ``new_public`` for ``[not_before, not_after)``, endorsed by
    ``endorser_seed``'s key."""
    record: dict[str, Any] = {
        "key_id": ed25519.key_id(new_public),
        "public_key": new_public.hex(),
        "not_before": not_before,
        "not_after": not_after,
        "endorsed_by": ed25519.key_id(ed25519.public_bytes(endorser_seed)),
    }
    record["signature"] = ed25519.sign(endorser_seed, key_record_message(record)).hex()
    return record


def anchor_document(roots: Sequence[tuple[bytes, int, int]], revoked: Sequence[str] = ()) -> bytes:
    """A trust anchor file: each root as ``(public_key, not_before, not_after)``, and revoked key ids."""
    document = {
        "schema_version": SCHEMA_VERSION,
        "roots": [
            {"key_id": ed25519.key_id(public), "public_key": public.hex(), "not_before": start, "not_after": end}
            for public, start, end in roots
        ],
        "revoked_key_ids": list(revoked),
    }
    return canonical_json(document) + b"\n"
