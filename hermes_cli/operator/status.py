"""What is installed in one Hermes home, read-only: the result every integration command ends with.

``provenance`` is what the ownership marker records (None when no managed plugin is there);
``outdated`` compares the install with the selected package, and is never true while that
source is unusable (no update could apply): then ``package_source_error`` names why, and
``package_source_missing`` says the install records a package that is no longer usable.
``enabled`` is what ``hermes plugins list --json`` says; when it cannot say,
``plugin_state_error`` holds the code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runtime_package import manifests
from shared.errors import HermesError

from . import assets, hermes_bin, lifecycle, settings
from .source import Source, SourceError, resolve
from .target import Target, policy_path


def source_or_error(state: Path) -> tuple[Source | None, SourceError | None]:
    try:
        return resolve(state), None
    except SourceError as exc:
        return None, exc


def outdated(marker: assets.Marker, source: Source | None) -> bool:
    if source is None:
        return False
    if marker.provenance != source.provenance:
        return True  # embedded, or another package or version than the selected one
    rendered = manifests.render(source.files, source.operator, marker.policy_path)
    return assets.asset_digests(rendered) != marker.assets


def enabled(target: Target, bin_path: str) -> tuple[bool, str | None]:
    """Whether Hermes lists the plugin as enabled, and why it could not tell (a code) if so."""
    if not lifecycle.found_roots(target):
        return False, None
    try:
        hermes_bin.check_bin(bin_path)  # status and doctor run only an executable install would
        return hermes_bin.plugin_state(bin_path, target.home) == hermes_bin.ENABLED, None
    except hermes_bin.HermesUnusable as exc:
        return False, exc.code


def report(
    target: Target,
    state: Path,
    bin_path: str,
    *,
    hermes: dict[str, Any] | None = None,
    source: tuple[Source | None, SourceError | None] | None = None,
) -> dict[str, Any]:
    selected, error = source if source is not None else source_or_error(state)
    found: lifecycle.Installed | None
    try:
        found = lifecycle.installed(target)
        marker_error = None
    except (lifecycle.PluginRootUnmanaged, assets.MarkerInvalid) as exc:
        found, marker_error = None, exc.code
    marker = found.marker if found is not None else None
    policy_file = policy_path(state, target)
    policy: dict[str, Any] | None = None
    if marker is not None:
        try:
            policy = settings.describe(policy_file, settings.read(policy_file))
        except HermesError:
            policy = None
    recorded_package = marker is not None and marker.provenance.get("source") == "package"
    is_enabled, state_error = enabled(target, bin_path)
    return {
        "agent": "hermes",
        "target": target.to_dict(),
        "installed": marker is not None,
        "enabled": is_enabled,
        "plugin_state_error": state_error,
        "plugin_root": str(found.root) if found is not None else None,
        "modified": found is not None and lifecycle.is_modified(target, found),
        "outdated": marker is not None and outdated(marker, selected),
        "package_source_missing": recorded_package and selected is None,
        "package_source_error": error.code if error is not None else None,
        "provenance": marker.provenance if marker is not None else None,
        "selected": selected.selected() if selected is not None else None,
        "policy": policy,
        "hermes": hermes,
        "plugin_root_error": marker_error,
        "stale": lifecycle.stale_siblings(target),
    }
