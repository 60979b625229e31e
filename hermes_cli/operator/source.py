"""Where an install's assets come from: the selected official Hermes runtime package.

One function decides, first match wins: an unreadable registry, no Hermes package, nothing
enabled and selected from a catalog, or a selected package that fails its checks. Install and
update refuse with the code and change nothing; status and doctor report it; uninstall never
asks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_cli.operator.errors import IntegrationError
from runtime_package import manifests, paths
from runtime_package import registry as store

REGISTRY_UNREADABLE = "hermes_package_registry_unreadable"
NOT_INSTALLED = "hermes_package_not_installed"
NOT_SELECTED = "hermes_package_not_selected"
INVALID_ASSET = manifests.InvalidAsset.code
HINTS = {
    REGISTRY_UNREADABLE: "Run `hermes operator package doctor` and repair the registry.",
    NOT_INSTALLED: "Install the official package from its signed catalog, then retry. "
    "`hermes operator uninstall` needs no package.",
    NOT_SELECTED: "Enable and select the intended official version with `hermes operator package enable` "
    "and `hermes operator package select`, or install one from its signed catalog.",
    INVALID_ASSET: "Verify it with `hermes operator package doctor` and reinstall it from its signed catalog.",
}
MESSAGES = {
    REGISTRY_UNREADABLE: "the runtime package registry cannot be read safely",
    NOT_INSTALLED: "no Hermes runtime package is installed",
    NOT_SELECTED: "a Hermes package is installed, but no enabled, catalog-authorized version is selected",
    INVALID_ASSET: "the selected Hermes package fails verification or its operator sidecar contract",
}


class SourceError(IntegrationError):
    def __init__(self, code: str, *, reason: str | None = None) -> None:
        detail: dict[str, Any] = {"hint": HINTS[code]}
        if reason is not None:
            detail["reason"] = reason
        super().__init__(MESSAGES[code], detail=detail)
        self.code = code


@dataclass(frozen=True)
class Source:
    package: store.Package
    files: dict[str, bytes]
    runtime: manifests.RuntimeManifest
    operator: manifests.OperatorManifest

    @property
    def provenance(self) -> dict[str, Any]:
        return {"source": "package", "package_id": self.package.package_id, "package_digest": self.package.digest}

    def selected(self) -> dict[str, Any]:
        return {"package_id": self.package.package_id, "version": self.package.version, "digest": self.package.digest}


def resolve(state: Path) -> Source:
    """The selected, enabled, catalog-authorized Hermes package, verified; else ``SourceError``."""
    root = paths.plugins_dir(state)
    if not root.exists() and not root.is_symlink():
        raise SourceError(NOT_INSTALLED)
    try:
        registry = store.Registry(root)
        record = registry.read()
    except (store.RegistryUnreadable, store.StoreUnsafe) as exc:
        raise SourceError(REGISTRY_UNREADABLE, reason=exc.code) from None
    ours = [p for p in record.packages if p.package_id == manifests.PACKAGE_ID]
    if not ours:
        raise SourceError(NOT_INSTALLED)
    package = record.selected_package(manifests.PACKAGE_ID)
    if package is None or not package.enabled or package.source != "official":
        raise SourceError(NOT_SELECTED)
    try:
        verified = registry.verify_root(package.digest)
        runtime = manifests.runtime_manifest(verified.files)
        operator = manifests.operator_manifest(verified.files, runtime)
    except (store.RootInvalid, manifests.InvalidAsset) as exc:
        raise SourceError(INVALID_ASSET, reason=exc.code) from None
    if runtime.version != package.version:
        raise SourceError(INVALID_ASSET, reason="version_mismatch")
    return Source(package, dict(verified.files), runtime, operator)
