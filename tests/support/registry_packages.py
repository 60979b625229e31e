"""A small runtime package for the registry's tests: its files, digests, and a registry to put it in."""

from __future__ import annotations

import hashlib
from pathlib import Path

from runtime_package.registry import Package, Registry

PACKAGE_ID = "pohunek.runtime.hermes"
# Sorted by path, so these are the manifest positions 0, 1, 2.
FILES: dict[str, tuple[bytes, bool]] = {
    "runtime.toml": (b'schema = 1\nid = "pohunek.runtime.hermes"\n', False),
    "bin/run": (b"#!/bin/sh\nexec hermes chat\n", True),
    "operator/pohunek/__init__.py": (b"POLICY = '__POHUNEK_POLICY_PATH__'\n", False),
}
BIN_RUN, OPERATOR_INIT, RUNTIME_TOML = 0, 1, 2


def digest(n: int) -> str:
    """A well-formed package digest; the registry trusts its caller for what it hashes."""
    return "sha256:" + hashlib.sha256(f"archive {n}".encode()).hexdigest()


def install(
    registry: Registry,
    n: int = 1,
    *,
    version: str = "1.0.0",
    package_id: str = PACKAGE_ID,
    files: dict[str, tuple[bytes, bool]] | None = None,
    source: str = "official",
    catalog_state: tuple[int, frozenset[str]] | None = None,
) -> Package:
    return registry.install(
        digest(n),
        FILES if files is None else files,
        package_id=package_id,
        version=version,
        source=source,
        installed_at=1_700_000_000 + n,
        catalog_state=catalog_state,
    )


def root_of(registry: Registry, n: int = 1) -> Path:
    return registry.packages / digest(n).removeprefix("sha256:")


def tree_bytes(path: Path) -> dict[str, tuple[bytes | str, int]]:
    """Every entry below ``path`` with its content (or link target) and mode, to compare trees."""
    out: dict[str, tuple[bytes | str, int]] = {}
    for entry in sorted(path.rglob("*")):
        st = entry.lstat()
        if entry.is_symlink():
            content: bytes | str = str(entry.readlink())
        elif entry.is_file():
            content = entry.read_bytes()
        else:
            content = ""
        out[str(entry.relative_to(path))] = (content, st.st_mode)
    return out
