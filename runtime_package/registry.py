"""The runtime package registry: the owner of ``<state>/plugins``.

Layout::

    registry.json       the record (schema 1, canonical JSON, 0600)
    registry.lock       advisory lock serializing every mutation
    catalog-state.json  the catalog high-water mark and revoked key ids, written only after a commit
    packages/<hex>/     content-addressed package roots (see ``package_root``)

Every mutation is a transaction under a non-blocking exclusive lock (a held lock is
RegistryBusy at once, never a wait): collect residue, read the record, change it, bump the
generation, replace the record atomically. A record that cannot be read is a typed error and is
never overwritten. Install publishes a root before recording it and uninstall un-records before
deleting, so the record never names a root that was never complete. Reads are lock-free.

The registry takes file contents its caller has already verified (archive and catalog); it
still checks every path and name it is given, and never reads the clock.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import shutil
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from runtime_package import catalog_state as catalog_state_rules
from runtime_package.catalog_state import CatalogState
from runtime_package.package_root import (
    MANIFEST,
    PACKAGE_FILES,
    Entry,
    VerifiedRoot,
    entries_of,
    manifest_bytes,
    manifest_digest,
    verify_tree,
    write_tree,
)
from runtime_package.paths import plugins_dir
from runtime_package.registry_errors import (
    PackageConflict,
    PackageDisabled,
    PackageNotInstalled,
    PackageRequestInvalid,
    RegistryBusy,
    RegistryUnreadable,
    RootInvalid,
    SelectorAmbiguous,
    StoreUnsafe,
)
from runtime_package.registry_record import (
    EMPTY,
    RECORD_LIMIT,
    SCHEMA,
    SOURCES,
    Package,
    Record,
    check_request,
    dump_record,
    is_count,
    is_digest,
    parse_record,
)
from runtime_package.store_json import FileRefused, read_private
from shared.faults import pause_at
from shared.files import fsync_dir, rename_noreplace, write_bytes_atomic

__all__ = [
    "CATALOG_STATE",
    "LOCK",
    "MANIFEST",
    "PACKAGE_FILES",
    "RECORD",
    "SCHEMA",
    "Package",
    "PackageConflict",
    "PackageDisabled",
    "PackageNotInstalled",
    "PackageRequestInvalid",
    "Record",
    "Registry",
    "RegistryBusy",
    "RegistryUnreadable",
    "RootInvalid",
    "SelectorAmbiguous",
    "StoreUnsafe",
    "VerifiedRoot",
    "accepted_catalog_state",
]

RECORD = "registry.json"
LOCK = "registry.lock"
CATALOG_STATE = "catalog-state.json"
PACKAGES = "packages"
STORE_MODE = 0o700
PRIVATE_MODE = 0o600
_RESIDUE = (".staging-", ".collect-")
# The temp files of an atomic write (shared.files) that a crash left behind.
_TEMP = re.compile(rf"\.({re.escape(RECORD)}|{re.escape(CATALOG_STATE)})\.[0-9a-f]+\.tmp")
_ROOT_NAME = re.compile(r"[0-9a-f]{64}")


class Registry:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.packages = self.root / PACKAGES

    @classmethod
    def at(cls, state: Path, *, create: bool) -> Registry:
        """The registry of ``state``; ``create`` makes a missing state (0700) and the store (0700).
        A missing store without ``create``, or one not exactly owner-private, is StoreUnsafe."""
        root = plugins_dir(state)
        if create:
            if not os.path.lexists(state):
                os.makedirs(state, STORE_MODE)
                os.chmod(state, STORE_MODE)  # the umask may have narrowed the mode
            _make_private_dir(root)
        _check_store(root)
        return cls(root)

    # --- reads (lock-free) ----------------------------------------------------------------------

    def read(self) -> Record:
        try:
            raw = read_private(self.root / RECORD, limit=RECORD_LIMIT)
        except FileRefused as exc:
            raise RegistryUnreadable(exc.reason) from None
        return EMPTY if raw is None else parse_record(raw)

    def catalog_state(self) -> tuple[int | None, frozenset[str]]:
        """(the highest catalog sequence accepted, every revoked key id seen); (None, {}) before any."""
        try:
            raw = read_private(self.root / CATALOG_STATE, limit=catalog_state_rules.LIMIT)
        except FileRefused as exc:
            raise RegistryUnreadable(f"catalog_state_{exc.reason}") from None
        if raw is None:
            return None, frozenset()
        return catalog_state_rules.parse(raw)

    def verify_root(self, digest: str) -> VerifiedRoot:
        if not is_digest(digest):
            raise PackageRequestInvalid("digest")
        package = self.read().by_digest(digest)
        if package is None:
            raise PackageNotInstalled()
        return self._verify(package)

    def doctor(self) -> dict[str, Any]:
        """Every finding, read-only: the record, each recorded root, orphan roots and residue."""
        record: Record | None
        try:
            record = self.read()
            record_report: dict[str, Any] = {"readable": True}
        except RegistryUnreadable as exc:
            record, record_report = None, {"readable": False, "reason": exc.reason}
        roots: list[dict[str, Any]] = []
        for package in record.packages if record is not None else ():
            try:
                self._verify(package)
                roots.append({"digest": package.digest, "ok": True})
            except RootInvalid as exc:
                roots.append({"digest": package.digest, "ok": False, "reason": exc.reason})
        names = self._package_names()
        recorded = {p.hex for p in record.packages} if record is not None else set()
        # Without a readable record nothing can be called an orphan.
        orphans = sorted(n for n in names if record is not None and _ROOT_NAME.fullmatch(n) and n not in recorded)
        residue = sorted(n for n in names if n.startswith(_RESIDUE))
        return {
            "ok": record is not None and all(r["ok"] for r in roots),
            "record": record_report,
            "roots": roots,
            "orphans": orphans,
            "residue": residue,
        }

    # --- mutations ------------------------------------------------------------------------------

    def install(
        self,
        digest: str,
        files: Mapping[str, tuple[bytes, bool]],
        *,
        package_id: str,
        version: str,
        source: str,
        installed_at: int,
        catalog_state: tuple[int, frozenset[str]] | None = None,
    ) -> Package:
        """Publish the root of ``digest`` holding ``files``, then record it; the same digest and
        identity again returns the recorded package. ``catalog_state`` is persisted only after."""
        if not is_digest(digest):
            raise PackageRequestInvalid("digest")
        check_request(package_id=package_id, version=version)
        if not isinstance(source, str) or source not in SOURCES:
            raise PackageRequestInvalid("source")
        if not is_count(installed_at):
            raise PackageRequestInvalid("installed_at")
        wanted = catalog_state_rules.check(catalog_state)
        entries, contents = entries_of(files)
        manifest = manifest_bytes(digest, entries)
        package = Package(digest, package_id, version, source, manifest_digest(manifest), installed_at, True)
        with self._transaction() as record:
            # Read now so an unreadable catalog state fails the install before anything changes.
            current = self.catalog_state() if wanted is not None else None
            existing = record.by_digest(digest)
            if existing is not None and not existing.same_identity(package):
                raise PackageConflict("digest_other_identity")
            same_identity = record.by_identity(package_id, version)
            if same_identity is not None and same_identity.digest != digest:
                raise PackageConflict("identity_other_digest")
            if existing is not None and existing.manifest_digest != package.manifest_digest:
                raise RootInvalid("files_differ")
            self._publish(package, manifest, entries, contents)
            if existing is None:
                self._commit(record.with_package(package))
                pause_at("registry:recorded")
            if wanted is not None and current is not None:
                # Also after an idempotent reinstall: the record naming the package is committed.
                self._merge_catalog_state(current, wanted)
            return existing or package

    def set_enabled(
        self, package_id: str, enabled: bool, *, version: str | None = None, digest: str | None = None
    ) -> Package:
        check_request(package_id=package_id, version=version, digest=digest)
        if not isinstance(enabled, bool):
            raise PackageRequestInvalid("enabled")
        with self._transaction() as record:
            package = record.resolve(package_id, version=version, digest=digest)
            if enabled:
                self._verify(package)
            changed_record, changed = record.with_enabled(package, enabled)
            self._commit(changed_record)
            return changed

    def select(self, package_id: str, *, version: str | None = None, digest: str | None = None) -> Package:
        check_request(package_id=package_id, version=version, digest=digest)
        with self._transaction() as record:
            package = record.resolve(package_id, version=version, digest=digest)
            if not package.enabled:
                raise PackageDisabled()
            self._verify(package)
            self._commit(record.with_selected(package))
            return package

    def uninstall(self, package_id: str, *, version: str | None = None, digest: str | None = None) -> Package:
        check_request(package_id=package_id, version=version, digest=digest)
        with self._transaction() as record:
            package = record.resolve(package_id, version=version, digest=digest)
            self._commit(record.without(package))
            self._delete_root(package.hex)
            return package

    # --- internals ------------------------------------------------------------------------------

    @contextmanager
    def _transaction(self) -> Iterator[Record]:
        _check_store(self.root)
        if os.path.lexists(self.packages):
            _check_store(self.packages)
        try:
            fd = os.open(self.root / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_MODE)
        except OSError:
            raise StoreUnsafe("lock_unusable") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RegistryBusy() from None
            self._collect_residue()
            yield self.read()
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def _commit(self, record: Record) -> None:
        write_bytes_atomic(self.root / RECORD, dump_record(record), mode=PRIVATE_MODE)

    def _verify(self, package: Package) -> VerifiedRoot:
        try:
            _check_store(self.packages)
        except StoreUnsafe:
            raise RootInvalid("store_unsafe") from None
        return verify_tree(self.packages / package.hex, package.digest, package.manifest_digest)

    def _publish(
        self, package: Package, manifest: bytes, entries: tuple[Entry, ...], contents: Mapping[str, bytes]
    ) -> None:
        """Make ``packages/<hex>`` a complete verified root; an existing one is adopted only if it verifies."""
        _make_private_dir(self.packages)
        _check_store(self.packages)
        target = self.packages / package.hex
        if os.path.lexists(target):
            verify_tree(target, package.digest, package.manifest_digest)
            return
        staging = self.packages / f"{_RESIDUE[0]}{package.hex}-{secrets.token_hex(8)}"
        try:
            write_tree(staging, manifest, entries, contents)
            pause_at("registry:staged")
            verify_tree(staging, package.digest, package.manifest_digest)
            try:
                rename_noreplace(staging, target)
            except FileExistsError:
                raise RootInvalid("root_appeared") from None
        except BaseException:
            _remove(staging)
            raise
        fsync_dir(self.packages)
        pause_at("registry:published")

    def _delete_root(self, hex_name: str) -> None:
        target = self.packages / hex_name
        if not os.path.lexists(target):
            return
        # Renamed first, so a crash mid-delete leaves residue the next mutation collects, not a half root.
        doomed = self.packages / f"{_RESIDUE[1]}{hex_name}-{secrets.token_hex(8)}"
        os.rename(target, doomed)
        fsync_dir(self.packages)
        _remove(doomed)

    def _collect_residue(self) -> None:
        for name in self._package_names():
            if name.startswith(_RESIDUE):
                _remove(self.packages / name)
        for name in os.listdir(self.root):
            if _TEMP.fullmatch(name):
                _remove(self.root / name)

    def _package_names(self) -> list[str]:
        try:
            _check_store(self.packages)
        except StoreUnsafe:
            return []
        return os.listdir(self.packages)

    def _merge_catalog_state(self, current: tuple[int | None, frozenset[str]], wanted: CatalogState) -> None:
        data = catalog_state_rules.merged(current, wanted)
        if data is not None:
            write_bytes_atomic(self.root / CATALOG_STATE, data, mode=PRIVATE_MODE)


def accepted_catalog_state(state: Path) -> tuple[int | None, frozenset[str]]:
    """What ``Registry.catalog_state`` says, read without making anything: (None, {}) while the
    registry does not exist (no catalog was ever accepted)."""
    if not os.path.lexists(plugins_dir(state)):
        return None, frozenset()
    return Registry.at(state, create=False).catalog_state()


def _make_private_dir(path: Path) -> None:
    try:
        os.mkdir(path, STORE_MODE)
    except FileExistsError:
        return
    os.chmod(path, STORE_MODE)


def _check_store(path: Path) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise StoreUnsafe("missing") from None
    if stat.S_ISLNK(st.st_mode):
        raise StoreUnsafe("symlink")
    if not stat.S_ISDIR(st.st_mode):
        raise StoreUnsafe("not_directory")
    if st.st_uid != os.geteuid():
        raise StoreUnsafe("foreign_owner")
    if stat.S_IMODE(st.st_mode) != STORE_MODE:
        raise StoreUnsafe("unsafe_mode")


def _remove(path: Path) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)  # the fd-based rmtree never follows a symlink inside
    else:
        os.unlink(path)
