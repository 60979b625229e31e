"""The typed refusals of the signed runtime catalog, its trust anchor and its authorizations.

One module so the strict JSON reader, the key checks and the verifier raise the same classes.
No message or detail ever carries catalog content (names, digests, key material): an entry
or a record is named by its position, a field by its place in our schema.
"""

from __future__ import annotations

from typing import Any

from runtime_package.package_errors import RuntimePackageError


class CatalogError(RuntimePackageError):
    """Every catalog refusal, so a caller can catch them all; ``detail`` always has ``reason``."""

    code = "catalog_error"

    def __init__(self, message: str, reason: str, **detail: Any) -> None:
        super().__init__(message, detail={"reason": reason, **detail})
        self.reason = reason


class CatalogInvalid(CatalogError):
    """The document is not a well-formed catalog: syntax, schema, limits or an entry rule."""

    code = "catalog_invalid"


class CatalogRollback(CatalogError):
    """The catalog's sequence is below the high-water mark of the last accepted catalog."""

    code = "catalog_rollback"


class CatalogExpired(CatalogError):
    code = "catalog_expired"


class CatalogUntrusted(CatalogError):
    """No signature verifies from a key whose whole lineage is valid now and unrevoked."""

    code = "catalog_untrusted"


class NotAuthorized(CatalogError):
    """A verified catalog does not authorize this package here (entry, digest, platform, core)."""

    code = "package_not_authorized"


class TrustUnavailable(CatalogError):
    """The trust anchor (or the recorded revocations) cannot be used."""

    code = "official_trust_unavailable"
