"""The package registry's record (``registry.json``): its shape, strict parse, canonical bytes,
and the selector rules (P).

The record is ``{"schema": 1, "generation", "packages": [...], "selected": {id: digest}}``.
Parsing denies unknown fields and every inconsistency (a digest recorded twice, an identity
recorded twice, a selection naming no package of its id): such a record is unreadable, never
guessed at. Selectors never guess either: more than one match is ambiguous.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from runtime_package.registry_errors import (
    PackageNotInstalled,
    PackageRequestInvalid,
    RegistryUnreadable,
    SelectorAmbiguous,
)
from runtime_package.store_json import FileRefused, canonical, strict_loads

SCHEMA = 1
SOURCES = frozenset({"official", "explicit_digest"})
RECORD_LIMIT = 1 << 20
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
_PACKAGE_FIELDS = frozenset({"digest", "package_id", "version", "source", "manifest_digest", "installed_at", "enabled"})
_RECORD_FIELDS = frozenset({"schema", "generation", "packages", "selected"})


@dataclass(frozen=True)
class Package:
    digest: str
    package_id: str
    version: str
    source: str
    manifest_digest: str
    installed_at: int
    enabled: bool

    @property
    def hex(self) -> str:
        return digest_hex(self.digest)

    def same_identity(self, other: Package) -> bool:
        return (self.package_id, self.version, self.source) == (other.package_id, other.version, other.source)


@dataclass(frozen=True)
class Record:
    generation: int
    packages: tuple[Package, ...]
    selected: dict[str, str]

    def selected_package(self, package_id: str) -> Package | None:
        digest = self.selected.get(package_id)
        return None if digest is None else self.by_digest(digest)

    def by_digest(self, digest: str) -> Package | None:
        return next((p for p in self.packages if p.digest == digest), None)

    def by_identity(self, package_id: str, version: str) -> Package | None:
        return next((p for p in self.packages if (p.package_id, p.version) == (package_id, version)), None)

    def resolve(self, package_id: str, *, version: str | None = None, digest: str | None = None) -> Package:
        """The one package the selector names: PackageNotInstalled for none, SelectorAmbiguous for several."""
        found = [
            p
            for p in self.packages
            if p.package_id == package_id
            and (version is None or p.version == version)
            and (digest is None or p.digest == digest)
        ]
        if not found:
            raise PackageNotInstalled()
        if len(found) > 1:
            raise SelectorAmbiguous(len(found))
        return found[0]

    def with_package(self, package: Package) -> Record:
        """The next record with ``package`` added or replaced (by digest); the first of its id is selected."""
        others = tuple(p for p in self.packages if p.digest != package.digest)
        selected = dict(self.selected)
        if not any(p.package_id == package.package_id for p in others):
            selected.setdefault(package.package_id, package.digest)
        return Record(self.generation + 1, _sorted((*others, package)), selected)

    def with_selected(self, package: Package) -> Record:
        return Record(self.generation + 1, self.packages, {**self.selected, package.package_id: package.digest})

    def with_enabled(self, package: Package, enabled: bool) -> tuple[Record, Package]:
        changed = replace(package, enabled=enabled)
        others = tuple(p for p in self.packages if p.digest != package.digest)
        return Record(self.generation + 1, _sorted((*others, changed)), dict(self.selected)), changed

    def without(self, package: Package) -> Record:
        selected = {k: v for k, v in self.selected.items() if v != package.digest}
        return Record(self.generation + 1, tuple(p for p in self.packages if p.digest != package.digest), selected)


EMPTY = Record(0, (), {})


def digest_hex(digest: str) -> str:
    return digest.removeprefix("sha256:")


def is_digest(value: object) -> bool:
    return isinstance(value, str) and _DIGEST.fullmatch(value) is not None


def is_name(value: object) -> bool:
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 63


def check_request(*, package_id: object, version: object = None, digest: object = None) -> None:
    """A selector or identity from a caller: PackageRequestInvalid on any malformed part."""
    if not is_name(package_id):
        raise PackageRequestInvalid("package_id")
    if version is not None and not is_name(version):
        raise PackageRequestInvalid("version")
    if digest is not None and not is_digest(digest):
        raise PackageRequestInvalid("digest")


def _sorted(packages: tuple[Package, ...]) -> tuple[Package, ...]:
    return tuple(sorted(packages, key=lambda p: (p.package_id, p.version, p.digest)))


def dump_record(record: Record) -> bytes:
    return canonical(
        {
            "schema": SCHEMA,
            "generation": record.generation,
            "packages": [
                {
                    "digest": p.digest,
                    "package_id": p.package_id,
                    "version": p.version,
                    "source": p.source,
                    "manifest_digest": p.manifest_digest,
                    "installed_at": p.installed_at,
                    "enabled": p.enabled,
                }
                for p in _sorted(record.packages)
            ],
            "selected": record.selected,
        }
    )


def parse_record(raw: bytes) -> Record:
    """The record in ``raw``; RegistryUnreadable (with a fixed reason) for anything else."""
    if len(raw) > RECORD_LIMIT:
        raise RegistryUnreadable("oversized")
    try:
        value = strict_loads(raw)
    except FileRefused as exc:
        raise RegistryUnreadable(exc.reason) from None
    if not isinstance(value, dict) or "schema" not in value:
        raise RegistryUnreadable("malformed")
    if value["schema"] != SCHEMA or isinstance(value["schema"], bool):
        raise RegistryUnreadable("unknown_schema")
    if set(value) != _RECORD_FIELDS or not is_count(value["generation"]):
        raise RegistryUnreadable("malformed")
    packages, selected = value["packages"], value["selected"]
    if not isinstance(packages, list) or not isinstance(selected, dict):
        raise RegistryUnreadable("malformed")
    parsed = tuple(_parse_package(p) for p in packages)
    if len({p.digest for p in parsed}) != len(parsed) or len({(p.package_id, p.version) for p in parsed}) != len(
        parsed
    ):
        raise RegistryUnreadable("inconsistent")
    record = Record(value["generation"], _sorted(parsed), dict(selected))
    for package_id, digest in selected.items():
        chosen = record.by_digest(digest) if is_digest(digest) else None
        if chosen is None or chosen.package_id != package_id:
            raise RegistryUnreadable("inconsistent")
    return record


def _parse_package(value: Any) -> Package:
    if not isinstance(value, dict) or set(value) != _PACKAGE_FIELDS:
        raise RegistryUnreadable("malformed")
    ok = (
        is_digest(value["digest"])
        and is_name(value["package_id"])
        and is_name(value["version"])
        and isinstance(value["source"], str)
        and value["source"] in SOURCES
        and is_digest(value["manifest_digest"])
        and is_count(value["installed_at"])
        and isinstance(value["enabled"], bool)
    )
    if not ok:
        raise RegistryUnreadable("malformed")
    return Package(**value)
