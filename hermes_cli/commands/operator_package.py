"""``hermes operator package install|list|enable|disable|select|uninstall|doctor``: the runtime
package registry.

A package is installed only through a signed catalog that authorizes its exact digest for
this platform and core: the catalog is verified against the trust anchor and the persisted
high-water mark, the digest of the raw archive bytes must be one it lists before a byte is
decompressed, then the archive is read strictly, the operator sidecar checked, the whole entry
authorized, and only then is the package root published and recorded; the catalog's sequence
is persisted after that commit. A refused install creates nothing, not even the registry.
The archive, the catalog and the trust anchor are read only as regular files (a FIFO is refused,
never waited on), up to their size limits; the archive and the catalog never through a symlink.
Selectors never guess: a package id with several versions needs ``--version`` or ``--digest``.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path
from typing import Any

from hermes_cli import output
from runtime_package import archive, catalog, manifests, paths
from runtime_package import registry as store
from runtime_package.canonical_json import MAX_JSON_BYTES
from runtime_package.package_errors import RuntimePackageError
from runtime_package.store_json import FileRefused, read_fd
from shared.version import __version__ as core_version

# O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer.
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


class InputUnreadable(RuntimePackageError):
    code = "package_input_unreadable"


def _unreadable(what: str, message: str, reason: str) -> InputUnreadable:
    return InputUnreadable(f"the {what} {message}", detail={"what": what, "reason": reason})


def _read_input(path: str | Path, limit: int, what: str, *, follow: bool = False) -> bytes:
    """At most ``limit`` bytes of the regular file at ``path`` (reached through a symlink only
    when ``follow``); anything else is refused, naming ``what`` it was given as."""
    try:
        fd = os.open(path, _OPEN_FLAGS if follow else _OPEN_FLAGS | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise _unreadable(what, "does not exist", "missing") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _unreadable(what, "is a symlink: give the file it points to", "symlink") from None
        raise _unreadable(what, "cannot be read", "unreadable") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _unreadable(what, "is not a regular file", "not_regular")
        return read_fd(fd, limit)
    except FileRefused:
        raise _unreadable(what, f"is larger than {limit} bytes", "too_large") from None
    except OSError:
        raise _unreadable(what, "cannot be read", "unreadable") from None
    finally:
        os.close(fd)


def _anchor(state: Path) -> catalog.Anchor:
    path = paths.trust_anchor_path(state)
    if not path.exists():
        raise catalog.TrustUnavailable(
            "no trust anchor: put the release's anchor at POHUNEK_TRUST_ANCHOR or <state>/trust/anchor.json",
            "anchor_missing",
        )
    # The owner configures where the anchor is, so a symlink there is theirs to follow.
    return catalog.parse_anchor(_read_input(path, MAX_JSON_BYTES, "trust anchor", follow=True))


def _registry(*, create: bool = False) -> store.Registry:
    return store.Registry.at(paths.pohunek_state(), create=create)


def _package(package: store.Package, record: store.Record | None = None) -> dict[str, Any]:
    data = {
        "package_id": package.package_id,
        "version": package.version,
        "digest": package.digest,
        "source": package.source,
        "enabled": package.enabled,
        "installed_at": package.installed_at,
    }
    if record is not None:
        data["selected"] = record.selected.get(package.package_id) == package.digest
    return data


def cmd_install(args) -> int:
    state = paths.pohunek_state()
    data = _read_input(args.archive, archive.MAX_COMPRESSED, "archive")
    signed = _read_input(args.catalog, catalog.MAX_CATALOG_BYTES, "catalog")
    anchor = _anchor(state)
    high_water, revoked = store.accepted_catalog_state(state)
    now = int(time.time())
    verified = catalog.verify(signed, anchor, now=now, high_water=high_water, revoked_key_ids=revoked)
    digest = archive.digest(data)
    verified.listing(digest)  # before a byte is decompressed
    entries = archive.read(data, expected_digest=digest)
    files = {entry.path: entry.data for entry in entries}
    runtime = manifests.runtime_manifest(files)
    manifests.operator_manifest(files, runtime)
    entry = verified.authorize(
        runtime.package_id, runtime.runtime_id, digest, platform=catalog.host_platform(), core_version=core_version
    )
    if entry.version != runtime.version:
        raise catalog.NotAuthorized("the catalog authorizes this digest as another version", "version")
    registry = _registry(create=True)
    package = registry.install(
        digest,
        {entry.path: (entry.data, entry.executable) for entry in entries},
        package_id=runtime.package_id,
        version=runtime.version,
        source="official",
        installed_at=now,
        catalog_state=(verified.sequence, verified.revoked_key_ids),
    )
    result = {**_package(package, registry.read()), "catalog_sequence": verified.sequence}
    output.emit(args, result, lambda d: f"installed {d['package_id']} {d['version']} {d['digest']}")
    return 0


def cmd_list(args) -> int:
    registry = _registry()
    record = registry.read() if registry.root.exists() else store.Record(0, (), {})
    rows = [_package(p, record) for p in record.packages]
    output.emit(args, {"generation": record.generation, "packages": rows}, _list_text)
    return 0


def _list_text(data: dict[str, Any]) -> str:
    if not data["packages"]:
        return "no runtime packages installed (hermes operator package install ARCHIVE --catalog CATALOG)"
    rows = [
        (
            p["package_id"],
            p["version"],
            "enabled" if p["enabled"] else "disabled",
            "selected" if p["selected"] else "",
            p["digest"],
        )
        for p in data["packages"]
    ]
    return output.table(("PACKAGE", "VERSION", "STATE", "", "DIGEST"), rows)


def _selector(args) -> dict[str, Any]:
    return {"version": args.package_version, "digest": args.digest}


def _changed(args, package: store.Package, verb: str) -> int:
    registry = _registry()
    output.emit(args, _package(package, registry.read()), lambda d: f"{verb} {d['package_id']} {d['version']}")
    return 0


def cmd_enable(args) -> int:
    return _changed(args, _registry().set_enabled(args.package_id, True, **_selector(args)), "enabled")


def cmd_disable(args) -> int:
    return _changed(args, _registry().set_enabled(args.package_id, False, **_selector(args)), "disabled")


def cmd_select(args) -> int:
    return _changed(args, _registry().select(args.package_id, **_selector(args)), "selected")


def cmd_uninstall(args) -> int:
    package = _registry().uninstall(args.package_id, **_selector(args))
    output.emit(args, _package(package), lambda d: f"uninstalled {d['package_id']} {d['version']}")
    return 0


def cmd_doctor(args) -> int:
    report = _registry().doctor()
    output.emit(args, report, _doctor_text)
    return 0 if report["ok"] else 1


def _doctor_text(data: dict[str, Any]) -> str:
    lines = ["registry " + ("ok" if data["record"].get("readable") else f"UNREADABLE ({data['record'].get('reason')})")]
    lines += [f"{'ok  ' if r['ok'] else 'FAIL'} {r['digest']} {r.get('reason') or ''}".rstrip() for r in data["roots"]]
    lines += [f"orphan root {name}" for name in data["orphans"]]
    return "\n".join(lines)
