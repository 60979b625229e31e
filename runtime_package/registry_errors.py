"""The typed errors of the package registry.

Messages are fixed per reason: none carries a package id, a path from a package, file bytes or
key material, because all of those come from outside. Entries are named by manifest position.
"""

from __future__ import annotations

from typing import Any

from runtime_package.package_errors import RuntimePackageError


class RegistryUnreadable(RuntimePackageError):
    """``registry.json`` or ``catalog-state.json`` is corrupt, unsafe or of an unknown schema."""

    code = "package_registry_unreadable"

    def __init__(self, reason: str) -> None:
        super().__init__(f"the package registry cannot be read ({reason})", detail={"reason": reason})
        self.reason = reason


class RegistryBusy(RuntimePackageError):
    code = "registry_busy"

    def __init__(self) -> None:
        super().__init__("another process is changing the package registry; try again")


class StoreUnsafe(RuntimePackageError):
    code = "plugin_store_unavailable"

    def __init__(self, reason: str) -> None:
        super().__init__(f"the plugin store is not an owner-private directory ({reason})", detail={"reason": reason})
        self.reason = reason


class RootInvalid(RuntimePackageError):
    code = "package_root_invalid"

    def __init__(self, reason: str, entry: int | None = None) -> None:
        detail: dict[str, Any] = {"reason": reason}
        where = ""
        if entry is not None:
            detail["entry"] = entry
            where = f" at entry {entry}"
        super().__init__(f"the package root does not verify ({reason}{where})", detail=detail)
        self.reason = reason
        self.entry = entry


class PackageConflict(RuntimePackageError):
    code = "package_conflict"

    def __init__(self, reason: str) -> None:
        super().__init__(f"the package conflicts with an installed one ({reason})", detail={"reason": reason})
        self.reason = reason


class SelectorAmbiguous(RuntimePackageError):
    code = "plugin_selector_ambiguous"

    def __init__(self, count: int) -> None:
        super().__init__(
            f"the selector matches {count} installed versions; name a version or a digest",
            detail={"count": count},
        )
        self.count = count


class PackageNotInstalled(RuntimePackageError):
    code = "plugin_not_installed"

    def __init__(self) -> None:
        super().__init__("no installed package matches the selector")


class PackageDisabled(RuntimePackageError):
    code = "plugin_disabled"

    def __init__(self) -> None:
        super().__init__("the package is disabled; enable it first")


class PackageRequestInvalid(RuntimePackageError):
    """A caller passed a malformed digest, identity, source, time or catalog state."""

    code = "package_request_invalid"

    def __init__(self, field: str) -> None:
        super().__init__(f"the package request has an invalid {field}", detail={"field": field})
        self.field = field
