"""The family of every runtime package error: the archive, the signed catalog, the registry."""

from __future__ import annotations

from shared.errors import HermesError


class RuntimePackageError(HermesError, family=True):
    """A signed runtime package: its archive, its catalog and trust, its registry and store."""
