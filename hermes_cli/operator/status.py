"""What is installed in one Hermes home, read-only: the result every integration command ends with.

``provenance`` is what the ownership marker records (None when no managed plugin is there);
``outdated`` compares the install with the selected package, and is never true while that
source is unusable (no update could apply): then ``package_source_error`` names why, and
``package_source_missing`` says the install records a package that is no longer usable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shared import plugin_host
from shared.errors import HermesError
from shared.operator import manifests

from . import assets, lifecycle, settings
from .source import Source, SourceError, resolve
from .target import PLUGIN_NAME, Target, policy_path


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


def report(
    target: Target,
    state: Path,
    *,
    hermes: dict[str, Any] | None = None,
    source: tuple[Source | None, SourceError | None] | None = None,
) -> dict[str, Any]:
    selected, error = source if source is not None else source_or_error(state)
    marker: assets.Marker | None
    try:
        marker = lifecycle.installed_marker(target)
        marker_error = None
    except (lifecycle.PluginRootUnmanaged, assets.MarkerInvalid) as exc:
        marker, marker_error = None, exc.code
    policy_file = policy_path(state, target)
    policy: dict[str, Any] | None = None
    if marker is not None:
        try:
            policy = settings.describe(policy_file, settings.read(policy_file))
        except HermesError:
            policy = None
    recorded_package = marker is not None and marker.provenance.get("source") == "package"
    return {
        "agent": "hermes",
        "target": target.to_dict(),
        "installed": marker is not None,
        "enabled": PLUGIN_NAME in plugin_host.enabled_names(target.home),
        "modified": marker is not None and lifecycle.is_modified(target, marker),
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
