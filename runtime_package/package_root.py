"""One content-addressed package root, ``packages/<hex>/{manifest.json, files/...}``: its
manifest, how it is written, and how it is verified.

The manifest sits beside ``files/`` (no name inside the tree is reserved) and lists every
file's path, size, sha256 and executable bit, plus the package digest. Writing creates every
file exclusively through directory descriptors and never follows a symlink; verifying walks
the tree the same way and accepts exactly what the manifest lists with exactly the modes the
root was written with. Findings name entries by manifest position, never by path or content.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime_package.registry_errors import RootInvalid
from runtime_package.store_json import FileRefused, canonical, read_fd, read_private, strict_loads
from shared import files

MANIFEST = "manifest.json"
PACKAGE_FILES = "files"
MANIFEST_SCHEMA = 1
MAX_FILES = 512
MAX_PATH_BYTES = 100
MAX_FILE_BYTES = 16 << 20
MAX_TOTAL_BYTES = 64 << 20
MANIFEST_LIMIT = 1 << 20
DIR_MODE = 0o700
FILE_MODE = 0o600
EXEC_MODE = 0o700
_SEGMENT = re.compile(r"[A-Za-z0-9._-]+")
_HEX = re.compile(r"[0-9a-f]{64}")
_MANIFEST_FIELDS = frozenset({"schema", "digest", "files"})
_ENTRY_FIELDS = frozenset({"path", "size", "sha256", "executable"})
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class Entry:
    path: str
    size: int
    sha256: str
    executable: bool


@dataclass(frozen=True)
class VerifiedRoot:
    digest: str
    path: Path
    files: dict[str, bytes]
    executable: frozenset[str]


# --- the manifest (pure) ------------------------------------------------------------------------


def entries_of(files: object) -> tuple[tuple[Entry, ...], dict[str, bytes]]:
    """The caller's ``{path: (bytes, executable)}`` checked and sorted; RootInvalid names the
    offending item by its position in the caller's mapping."""
    if not isinstance(files, Mapping) or not files:
        raise RootInvalid("no_files")
    if len(files) > MAX_FILES:
        raise RootInvalid("too_many_files")
    entries: list[Entry] = []
    contents: dict[str, bytes] = {}
    total = 0
    for index, (path, value) in enumerate(files.items()):
        ok = isinstance(value, tuple) and len(value) == 2
        if not ok or not isinstance(value[0], bytes) or not isinstance(value[1], bool) or not _path_ok(path):
            raise RootInvalid("entry_invalid", index)
        data, executable = value
        if len(data) > MAX_FILE_BYTES:
            raise RootInvalid("file_too_large", index)
        total += len(data)
        entries.append(Entry(path, len(data), hashlib.sha256(data).hexdigest(), executable))
        contents[path] = data
    if total > MAX_TOTAL_BYTES:
        raise RootInvalid("total_too_large")
    problem = _layout_problem([e.path for e in entries])
    if problem is not None:
        raise RootInvalid(*problem)
    return tuple(sorted(entries, key=lambda e: e.path)), contents


def manifest_bytes(digest: str, entries: tuple[Entry, ...]) -> bytes:
    files = [{"path": e.path, "size": e.size, "sha256": e.sha256, "executable": e.executable} for e in entries]
    return canonical({"schema": MANIFEST_SCHEMA, "digest": digest, "files": files})


def manifest_digest(raw: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def parse_manifest(raw: bytes, digest: str) -> tuple[Entry, ...]:
    try:
        value = strict_loads(raw)
    except FileRefused:
        raise RootInvalid("manifest_malformed") from None
    if not isinstance(value, dict) or set(value) != _MANIFEST_FIELDS or not isinstance(value["files"], list):
        raise RootInvalid("manifest_malformed")
    if value["schema"] != MANIFEST_SCHEMA or isinstance(value["schema"], bool) or not isinstance(value["digest"], str):
        raise RootInvalid("manifest_malformed")
    if value["digest"] != digest:
        raise RootInvalid("manifest_foreign")
    items = value["files"]
    if not items or len(items) > MAX_FILES:
        raise RootInvalid("manifest_malformed")
    entries = tuple(_parse_entry(item, index) for index, item in enumerate(items))
    paths = [e.path for e in entries]
    if paths != sorted(set(paths)) or sum(e.size for e in entries) > MAX_TOTAL_BYTES:
        raise RootInvalid("manifest_malformed")
    problem = _layout_problem(paths)
    if problem is not None:
        raise RootInvalid("manifest_malformed", problem[1])
    return entries


def _parse_entry(item: Any, index: int) -> Entry:
    ok = (
        isinstance(item, dict)
        and set(item) == _ENTRY_FIELDS
        and _path_ok(item["path"])
        and isinstance(item["size"], int)
        and not isinstance(item["size"], bool)
        and 0 <= item["size"] <= MAX_FILE_BYTES
        and isinstance(item["sha256"], str)
        and _HEX.fullmatch(item["sha256"]) is not None
        and isinstance(item["executable"], bool)
    )
    if not ok:
        raise RootInvalid("manifest_malformed", index)
    return Entry(item["path"], item["size"], item["sha256"], item["executable"])


def _path_ok(path: object) -> bool:
    if not isinstance(path, str) or not path.isascii() or len(path) > MAX_PATH_BYTES:
        return False
    return all(_SEGMENT.fullmatch(s) is not None and s not in (".", "..") for s in path.split("/"))


def _layout_problem(paths: list[str]) -> tuple[str, int] | None:
    """Two paths equal but for case, or a path that is also another's directory: (reason, index)."""
    folded: dict[str, int] = {}
    for index, path in enumerate(paths):
        if folded.setdefault(path.lower(), index) != index:
            return "path_collision", index
    for index, path in enumerate(paths):
        parts = path.lower().split("/")
        if any("/".join(parts[:n]) in folded for n in range(1, len(parts))):
            return "path_collision", index
    return None


# --- writing ------------------------------------------------------------------------------------


def write_tree(staging: Path, manifest: bytes, entries: tuple[Entry, ...], contents: Mapping[str, bytes]) -> None:
    """Create ``staging`` (which must not exist) holding ``manifest`` and the files, all fsynced."""
    os.mkdir(staging, DIR_MODE)
    root = os.open(staging, _DIR_FLAGS)
    dirs: dict[str, int] = {}
    try:
        os.fchmod(root, DIR_MODE)
        files.create_in(root, MANIFEST, manifest, FILE_MODE)
        dirs[""] = _make_dir(root, PACKAGE_FILES)
        for entry in entries:
            parent, _, name = entry.path.rpartition("/")
            files.create_in(
                _dir_for(dirs, parent), name, contents[entry.path], EXEC_MODE if entry.executable else FILE_MODE
            )
        # Deepest first, so each directory's entries are durable before its parent's.
        for key in sorted(dirs, key=lambda k: -k.count("/") - (k != "")):
            os.fsync(dirs[key])
        os.fsync(root)
    finally:
        for fd in dirs.values():
            os.close(fd)
        os.close(root)


def _dir_for(dirs: dict[str, int], rel: str) -> int:
    if rel not in dirs:
        parent, _, name = rel.rpartition("/")
        dirs[rel] = _make_dir(_dir_for(dirs, parent), name)
    return dirs[rel]


def _make_dir(parent_fd: int, name: str) -> int:
    os.mkdir(name, DIR_MODE, dir_fd=parent_fd)
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    os.fchmod(fd, DIR_MODE)  # the umask may have narrowed or the mkdir mode
    return fd


# --- verifying ----------------------------------------------------------------------------------


def verify_tree(path: Path, digest: str, expected_manifest_digest: str) -> VerifiedRoot:
    """Re-verify the root at ``path`` against its manifest, which must hash to the recorded digest."""
    _check_dir_stat(_lstat(path), "root")
    try:
        root = os.open(path, _DIR_FLAGS)
    except OSError:
        raise RootInvalid("root_not_directory") from None
    try:
        if set(os.listdir(root)) - {MANIFEST, PACKAGE_FILES}:
            raise RootInvalid("added_entry")
        entries = _read_manifest(root, digest, expected_manifest_digest)
        try:
            files_stat = os.stat(PACKAGE_FILES, dir_fd=root, follow_symlinks=False)
        except FileNotFoundError:
            raise RootInvalid("files_missing") from None
        _check_dir_stat(files_stat, "files")
        files_fd = os.open(PACKAGE_FILES, _DIR_FLAGS, dir_fd=root)
        try:
            expected = {e.path: (i, e) for i, e in enumerate(entries)}
            wanted_dirs = {p.rsplit("/", n)[0] for p in expected for n in range(1, p.count("/") + 1)}
            files = dict(_walk(files_fd, "", expected, wanted_dirs))
        finally:
            os.close(files_fd)
    except OSError:
        # The tree changed under the walk (an entry vanished or turned into something else).
        raise RootInvalid("unreadable") from None
    finally:
        os.close(root)
    for index, entry in enumerate(entries):
        if entry.path not in files:
            raise RootInvalid("missing", index)
    return VerifiedRoot(digest, Path(path), files, frozenset(e.path for e in entries if e.executable))


def _read_manifest(root: int, digest: str, expected_manifest_digest: str) -> tuple[Entry, ...]:
    try:
        raw = read_private(MANIFEST, limit=MANIFEST_LIMIT, dir_fd=root)
    except FileRefused as exc:
        raise RootInvalid(f"manifest_{exc.reason}") from None
    if raw is None:
        raise RootInvalid("manifest_missing")
    entries = parse_manifest(raw, digest)
    if manifest_digest(raw) != expected_manifest_digest:
        raise RootInvalid("manifest_modified")
    return entries


def _lstat(path: Path) -> os.stat_result:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        raise RootInvalid("root_missing") from None


def _check_dir_stat(st: os.stat_result, what: str) -> None:
    if not stat.S_ISDIR(st.st_mode):
        raise RootInvalid(f"{what}_not_directory")
    if st.st_uid != os.geteuid():
        raise RootInvalid(f"{what}_foreign_owner")
    if stat.S_IMODE(st.st_mode) != DIR_MODE:
        raise RootInvalid(f"{what}_unsafe_mode")


def _walk(
    dir_fd: int, prefix: str, expected: dict[str, tuple[int, Entry]], wanted_dirs: set[str]
) -> Iterator[tuple[str, bytes]]:
    for name in sorted(os.listdir(dir_fd)):
        rel = prefix + name
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if rel in expected:
            index, entry = expected[rel]
            if not stat.S_ISREG(st.st_mode):
                raise RootInvalid("not_regular", index)
            yield rel, _read_entry(dir_fd, name, st, entry, index)
        elif rel in wanted_dirs and stat.S_ISDIR(st.st_mode):
            _check_dir_stat(st, "directory")
            child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            try:
                if (os.fstat(child).st_ino, os.fstat(child).st_dev) != (st.st_ino, st.st_dev):
                    raise RootInvalid("unreadable")
                yield from _walk(child, rel + "/", expected, wanted_dirs)
            finally:
                os.close(child)
        else:
            # Something the manifest does not name (or a directory swapped for a symlink or file).
            raise RootInvalid("added_entry")


def _read_entry(dir_fd: int, name: str, st: os.stat_result, entry: Entry, index: int) -> bytes:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_ino, now.st_dev) != (st.st_ino, st.st_dev):
            raise RootInvalid("not_regular", index)
        if now.st_uid != os.geteuid():
            raise RootInvalid("foreign_owner", index)
        if now.st_nlink != 1:
            raise RootInvalid("hard_link", index)
        if stat.S_IMODE(now.st_mode) != (EXEC_MODE if entry.executable else FILE_MODE):
            raise RootInvalid("mode_mismatch", index)
        if now.st_size != entry.size:
            raise RootInvalid("size_mismatch", index)
        try:
            data = read_fd(fd, entry.size)
        except FileRefused:
            raise RootInvalid("size_mismatch", index) from None
        if hashlib.sha256(data).hexdigest() != entry.sha256:
            raise RootInvalid("content_mismatch", index)
        return data
    finally:
        os.close(fd)
