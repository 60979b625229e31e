"""The installed plugin's files and its ownership marker.

``<plugin root>/.pohunek-owned.json`` (0600) records what the installer wrote: the home, the
policy path, each asset's sha256 and where the assets came from. A version-1 marker (the
earlier format, with no provenance) is an install an older renderer made from the copy it
carried: ``{"source": "embedded"}``. The install is *modified* when an asset is missing,
changed or not 0600, or anything else is in the plugin root (a ``__pycache__`` too: compiled
code the checksums do not cover would run instead of the checked source).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_cli.operator.errors import IntegrationError
from runtime_package.manifests import sha256_hex
from shared import files

from .dirfd import Dir, descend

MARKER = ".pohunek-owned.json"
MARKER_VERSION = 2
EMBEDDED: dict[str, Any] = {"source": "embedded"}
MAX_MARKER_BYTES = 256 * 1024
ASSET_MODE = 0o600
_V1_FIELDS = {"version", "hermes_home", "policy_path", "assets"}
_V2_FIELDS = _V1_FIELDS | {"provenance", "installed_by"}


class MarkerInvalid(IntegrationError):
    code = "ownership_marker_invalid"


@dataclass(frozen=True)
class Marker:
    hermes_home: str
    policy_path: str
    assets: dict[str, str]  # path inside the plugin root -> sha256 hex
    provenance: dict[str, Any]

    def to_bytes(self, installed_by: str) -> bytes:
        document = {
            "version": MARKER_VERSION,
            "hermes_home": self.hermes_home,
            "policy_path": self.policy_path,
            "assets": dict(sorted(self.assets.items())),
            "provenance": self.provenance,
            "installed_by": {"cli": installed_by},
        }
        return json.dumps(document, indent=2, sort_keys=True).encode() + b"\n"


def read_marker(plugin_root: Path) -> Marker | None:
    """The marker, or None when the plugin root has none; ``MarkerInvalid`` when it is not one."""
    path = plugin_root / MARKER
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError:
        raise MarkerInvalid("the ownership marker cannot be opened") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise MarkerInvalid("the ownership marker is not a regular file")
        data = os.read(fd, MAX_MARKER_BYTES + 1)
    finally:
        os.close(fd)
    try:
        raw = json.loads(data.decode("utf-8")) if len(data) <= MAX_MARKER_BYTES else None
    except (ValueError, RecursionError):
        raw = None
    return _parse(raw)


def _parse(raw: Any) -> Marker:
    if not isinstance(raw, dict) or raw.get("version") not in (1, MARKER_VERSION):
        raise MarkerInvalid("the ownership marker is not one this installer wrote")
    if set(raw) != (_V1_FIELDS if raw["version"] == 1 else _V2_FIELDS):
        raise MarkerInvalid("the ownership marker has unknown or missing fields")
    home, policy, assets = raw["hermes_home"], raw["policy_path"], raw["assets"]
    if not all(isinstance(v, str) and os.path.isabs(v) for v in (home, policy)) or not isinstance(assets, dict):
        raise MarkerInvalid("the ownership marker's paths or assets are malformed")
    if not all(safe_rel(k) and isinstance(v, str) and len(v) == 64 for k, v in assets.items()):
        raise MarkerInvalid("the ownership marker lists a malformed asset")
    provenance = EMBEDDED if raw["version"] == 1 else raw["provenance"]
    if provenance != EMBEDDED and not _package_provenance(provenance):
        raise MarkerInvalid("the ownership marker's provenance is malformed")
    return Marker(home, policy, dict(assets), dict(provenance))


def _package_provenance(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and set(value) == {"source", "package_id", "package_digest"}
        and value["source"] == "package"
        and all(isinstance(value[k], str) for k in value)
    )


def safe_rel(path: Any) -> bool:
    if not isinstance(path, str) or not path or path.startswith("/"):
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


def modified(plugin_root: Path, marker: Marker) -> bool:
    """An asset is missing, changed or not 0600, or an entry no asset accounts for is there."""
    expected_dirs = {str(Path(p).parent) for p in marker.assets} - {"."}
    expected_dirs |= {str(parent) for d in list(expected_dirs) for parent in Path(d).parents} - {"."}
    for directory, dirnames, filenames in os.walk(plugin_root, followlinks=False):
        rel_dir = os.path.relpath(directory, plugin_root)
        for name in dirnames:
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if rel not in expected_dirs or os.path.islink(os.path.join(directory, name)):
                return True
        for name in filenames:
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if rel != MARKER and rel not in marker.assets:
                return True
    for rel, digest in marker.assets.items():
        try:
            info = os.lstat(plugin_root / rel)
            if not stat.S_ISREG(info.st_mode) or stat.S_IMODE(info.st_mode) != ASSET_MODE:
                return True
            if files.file_sha256(plugin_root / rel) != digest:
                return True
        except OSError:
            return True
    return False


def write_tree(parent: Dir, name: str, rendered: Mapping[str, bytes], marker: bytes) -> None:
    """A new plugin directory ``name`` in ``parent``: each file created exclusively (0600) in
    0700 directories, synced, and nothing reached through a link."""
    parent.make_dir(name)
    for rel, data in sorted({**rendered, MARKER: marker}.items()):
        *parts, filename = rel.split("/")
        directory = descend(parent, [name, *parts], create=True)
        assert directory is not None  # made where missing
        with directory:
            directory.write_new(filename, data, ASSET_MODE)


def asset_digests(rendered: Mapping[str, bytes]) -> dict[str, str]:
    return {rel: sha256_hex(data) for rel, data in rendered.items()}
