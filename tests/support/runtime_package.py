"""Runtime packages as a release makes them, per test: a signing key made for the run, a trust
anchor holding it, the Hermes package built from the source tree (or a changed copy), a signed
catalog, and the integration's state directory the CLI reads through its environment."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from runtime_package import archive, catalog, manifests
from runtime_package.archive_dir import entries_from_dir
from tests.support.cli import hermes, hermes_json
from tests.support.processes import ROOT

SOURCE = ROOT / "runtime-packages" / "hermes"
HERMES_ID = manifests.PACKAGE_ID


def refresh_operator_manifest(directory: Path) -> None:
    """Rewrite ``operator.toml`` to close the payload as it now is (what a release build does)."""
    files = {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != manifests.OPERATOR_MANIFEST
    }
    (directory / manifests.OPERATOR_MANIFEST).write_text(manifests.operator_manifest_text(files))


class PackageKit:
    """One run's packages, key, anchor and state: ``env`` points the CLI at them."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.state = base / "pohunek-state"
        self.state.mkdir(mode=0o700)
        self.seed = os.urandom(32)
        public = Ed25519PrivateKey.from_private_bytes(self.seed).public_key().public_bytes_raw()
        now = int(time.time())
        self.anchor = base / "anchor.json"
        self.anchor.write_bytes(catalog.anchor_document([(public, now - 60, now + 86_400)]))
        self.env = {"POHUNEK_STATE_DIR": str(self.state), "POHUNEK_TRUST_ANCHOR": str(self.anchor)}
        self._built = 0

    def tree(self, edit: Callable[[Path], Any] | None = None, *, version: str | None = None) -> Path:
        """A copy of the package source, changed by ``edit`` and given ``version``, its operator
        manifest refreshed."""
        self._built += 1
        directory = self.base / f"package-{self._built}"
        shutil.copytree(SOURCE, directory, ignore=shutil.ignore_patterns("__pycache__"))
        if version is not None:
            runtime = directory / manifests.RUNTIME_MANIFEST
            runtime.write_text(runtime.read_text().replace('version = "1.0.0"', f'version = "{version}"', 1))
        if edit is not None:
            edit(directory)
        refresh_operator_manifest(directory)
        return directory

    def build(self, directory: Path | None = None) -> Path:
        directory = directory or self.tree()
        path = directory.with_suffix(".tar.zst")
        path.write_bytes(archive.build(entries_from_dir(directory)))
        return path

    def sign(self, archives: list[Path], *, sequence: int = 1, expires_in: int = 86_400) -> Path:
        entries = []
        for path in archives:
            files = {e.path: e.data for e in archive.read(path.read_bytes())}
            version = manifests.runtime_manifest(files).version
            entries.append(
                {
                    "package_id": HERMES_ID,
                    "runtime_id": manifests.RUNTIME_ID,
                    "version": version,
                    "digest": archive.digest(path.read_bytes()),
                    "platforms": [catalog.host_platform()],
                    "core": ">=0.1.0, <1.0.0",
                }
            )
        document = {
            "schema_version": 1,
            "sequence": sequence,
            "expires_at": int(time.time()) + expires_in,
            "revoked_key_ids": [],
            "revoked_digests": [],
            "entries": entries,
        }
        path = self.base / f"catalog-{sequence}-{len(entries)}-{self._built}.json"
        path.write_bytes(catalog.sign_catalog(document, self.seed))
        return path

    def cli(self, *args: str, **options: Any):
        extra = {**self.env, **options.pop("env_extra", {})}
        return hermes(*args, env_extra=extra, **options)

    def cli_json(self, *args: str, **options: Any) -> tuple[int, Any]:
        return hermes_json(*args, env_extra={**self.env, **options.pop("env_extra", {})}, **options)

    def install_package(self, path: Path | None = None, *, sequence: int = 1) -> dict[str, Any]:
        path = path or self.build()
        code, data = self.cli_json(
            "operator", "package", "install", str(path), "--catalog", str(self.sign([path], sequence=sequence))
        )
        assert code == 0, data
        return data
