"""A release's source archive: downloaded over HTTP, read as ZIP or tar, unpacked safely.

Only the archive fallback of the apply stage uses this. The archive comes from a URL in the
root home's config, so everything in it is outside input: a member may not leave the tree
(absolute paths, ``..``, symlinks pointing out), may not be a device, a fifo or a hard link,
and may not touch ``.git``; the download and the unpacked size are capped, so a hostile or
broken server cannot fill the disk, and the download has a deadline no server can stretch.

The commit an archive was cut from is read from the archive itself: ``git archive`` (and the
forges that serve it) writes it as the ZIP comment or as the tar's pax global ``comment``.
An archive without one is refused: the update could not say which code it installed.
"""

from __future__ import annotations

import itertools
import os
import stat
import tarfile
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Literal
from urllib.parse import quote, urlsplit

from services.updater.errors import UpdateError
from shared.redaction import redact_text
from shared.retry_after import retry_after_seconds
from shared.version import is_commit_sha

if TYPE_CHECKING:
    import httpx

MAX_DOWNLOAD = 512 * 1024**2
MAX_UNPACKED = 2 * 1024**3
MAX_MEMBERS = 200_000
DOWNLOAD_DEADLINE = 600.0  # the whole download, all attempts included
ATTEMPTS = 3
RETRY_AFTER_CAP = 30.0
CHUNK = 256 * 1024


class ArchiveFailed(UpdateError):
    """The archive could not be downloaded or read; nothing in the tree was touched."""

    code = "archive_failed"


class DownloadTimedOut(ArchiveFailed):
    """The download did not finish within its deadline (all attempts included)."""

    code = "download_timed_out"


class DownloadStopped(ArchiveFailed):
    """The caller asked the download to stop (a stop signal): nothing was installed."""

    code = "download_stopped"


class ArchiveUnsafe(ArchiveFailed):
    """A member would land outside the tree, or is something a source tree never holds."""

    code = "archive_unsafe"


def archive_url(template: str, branch: str) -> str:
    """The configured URL with ``{branch}`` filled in; only http(s) is fetched."""
    url = template.replace("{branch}", quote(branch, safe=""))
    if urlsplit(url).scheme not in ("http", "https"):
        raise ArchiveFailed(f"the archive URL must be http(s): {redact_text(url)}", detail={"url": redact_text(url)})
    return url


# --- download ---------------------------------------------------------------------------------


def download(
    url: str,
    dest: Path,
    *,
    deadline: float = DOWNLOAD_DEADLINE,
    attempts: int = ATTEMPTS,
    sleep: Callable[[float], None] = time.sleep,
    timeout: httpx.Timeout | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> int:
    """Stream ``url`` into ``dest``; the number of bytes. 429, 5xx and transport errors are
    retried (``Retry-After`` honoured, capped) up to ``attempts`` times within ``deadline``.
    ``should_stop`` is asked on every piece received and between attempts."""
    # Imported here, not at the top: only the archive fallback downloads, and httpx is a large
    # part of the updater's start-up.
    import httpx

    shown = redact_text(url)
    clock = _Clock(time.monotonic() + deadline, deadline, shown, should_stop or (lambda: False))
    timeout = timeout or httpx.Timeout(30.0, connect=10.0)
    last = "no attempt was made"
    with httpx.Client(follow_redirects=True, timeout=timeout, max_redirects=5) as client:
        for attempt in range(1, attempts + 1):
            clock.check()
            wait = 0.0
            try:
                # No single read may outlast the deadline: a server that keeps the connection
                # alive byte by byte resets a plain read timeout forever.
                with client.stream("GET", url, timeout=clock.bound(timeout)) as response:
                    if response.status_code == 200:
                        return _save(response, dest, clock)
                    last = f"HTTP {response.status_code}"
                    if response.status_code != 429 and response.status_code < 500:
                        raise ArchiveFailed(
                            f"downloading {shown} failed: {last}", detail={"url": shown, "status": response.status_code}
                        )
                    wait = retry_after_seconds(response.headers.get("retry-after"), cap=RETRY_AFTER_CAP)
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {redact_text(str(exc))}" if str(exc) else type(exc).__name__
            wait = max(wait, 0.5 * 2 ** (attempt - 1))
            if attempt == attempts or time.monotonic() + wait >= clock.ends:
                break
            sleep(wait)
    clock.check()  # a stop that came during the last attempt is a stop, not a failure
    raise ArchiveFailed(f"downloading {shown} failed after {attempt} attempt(s): {last}", detail={"url": shown})


@dataclass(frozen=True)
class _Clock:
    ends: float
    deadline: float
    shown: str
    should_stop: Callable[[], bool]

    def check(self) -> None:
        if self.should_stop():
            raise DownloadStopped(f"downloading {self.shown} was stopped", detail={"url": self.shown})
        if time.monotonic() > self.ends:
            raise DownloadTimedOut(
                f"downloading {self.shown} took longer than {self.deadline:g}s",
                detail={"url": self.shown, "deadline": self.deadline},
            )

    def bound(self, timeout: httpx.Timeout) -> httpx.Timeout:
        """``timeout`` with every phase cut to the time left."""
        import httpx  # loaded by ``download`` already, as this is called only from there

        left = max(self.ends - time.monotonic(), 0.001)
        phases = {name: getattr(timeout, name) for name in ("connect", "read", "write", "pool")}
        return httpx.Timeout(**{name: left if t is None else min(t, left) for name, t in phases.items()})


def _save(response: httpx.Response, dest: Path, clock: _Clock) -> int:
    declared = response.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_DOWNLOAD:
        raise ArchiveFailed(f"{clock.shown} is {int(declared)} bytes, over the {MAX_DOWNLOAD}-byte limit")
    size = 0
    with open(dest, "wb") as out:
        for piece in response.iter_bytes():  # as it arrives: a fixed chunk size would wait to fill it
            clock.check()
            size += len(piece)
            if size > MAX_DOWNLOAD:
                raise ArchiveFailed(f"{clock.shown} is over the {MAX_DOWNLOAD}-byte limit")
            out.write(piece)
        out.flush()
        os.fsync(out.fileno())
    return size


# --- reading and unpacking ----------------------------------------------------------------------


Kind = Literal["file", "dir", "symlink"]


@dataclass(frozen=True)
class Member:
    path: PurePosixPath  # relative to the tree, the archive's top directory stripped
    kind: Kind
    executable: bool
    size: int
    link: str | None  # a symlink's target
    open: Callable[[], IO[bytes]] | None


@dataclass(frozen=True)
class Unpacked:
    tree: Path
    commit: str
    roots: frozenset[str]  # the tree's top-level entries: what the swap replaces
    files: tuple[str, ...]  # every file and symlink, relative, in archive order
    size: int


def unpack(archive: Path, dest: Path) -> Unpacked:
    """Unpack ``archive`` (ZIP or tar, any compression) into the new directory ``dest``."""
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                return _unpack(_zip_commit(zf), _zip_members(zf), dest)
        if not tarfile.is_tarfile(archive):
            raise ArchiveFailed("the download is neither a ZIP nor a tar archive")
        with tarfile.open(archive) as tf:
            members = list(itertools.islice(_tar_members(tf), MAX_MEMBERS + 1))  # reads the pax header too
            return _unpack(_tar_commit(tf), iter(members), dest)
    except (OSError, EOFError, zlib.error, zipfile.BadZipFile, tarfile.TarError) as exc:
        # A truncated or corrupt archive, a duplicated member: nothing half-unpacked is used.
        raise ArchiveFailed(f"the archive could not be unpacked: {type(exc).__name__}: {exc}") from None


def _zip_commit(zf: zipfile.ZipFile) -> str | None:
    return zf.comment.decode("ascii", "replace").strip() or None


def _tar_commit(tf: tarfile.TarFile) -> str | None:
    comment = tf.pax_headers.get("comment")
    return comment.strip() if comment else None


def _zip_members(zf: zipfile.ZipFile) -> Iterator[tuple[str, Member]]:
    for info in zf.infolist():
        mode = info.external_attr >> 16
        name = info.filename
        if info.is_dir():
            kind: Kind = "dir"
        elif stat.S_ISLNK(mode):
            kind = "symlink"
        elif stat.S_IFMT(mode) and not stat.S_ISREG(mode):  # no type bits: a plain file
            raise ArchiveUnsafe(f"archive member {name!r} is not a file, directory or symlink")
        else:
            kind = "file"
        link = zf.read(info).decode("utf-8", "surrogateescape") if kind == "symlink" else None
        opener = (lambda info=info: zf.open(info)) if kind == "file" else None
        yield name, Member(PurePosixPath(), kind, bool(mode & 0o111), info.file_size, link, opener)


def _tar_members(tf: tarfile.TarFile) -> Iterator[tuple[str, Member]]:
    for info in tf:
        if info.isdir():
            kind: Kind = "dir"
        elif info.issym():
            kind = "symlink"
        elif info.isreg():
            kind = "file"
        else:  # hard links, devices, fifos: a source tree has none
            raise ArchiveUnsafe(f"archive member {info.name!r} is not a file, directory or symlink")
        opener = _tar_opener(tf, info) if kind == "file" else None
        link = info.linkname if kind == "symlink" else None
        yield info.name, Member(PurePosixPath(), kind, bool(info.mode & 0o111), info.size, link, opener)


def _tar_opener(tf: tarfile.TarFile, info: tarfile.TarInfo) -> Callable[[], IO[bytes]]:
    def open_member() -> IO[bytes]:
        stream = tf.extractfile(info)
        if stream is None:  # a regular file's member always has one; only those are opened
            raise ArchiveUnsafe(f"archive member {info.name!r} has no content")
        return stream

    return open_member


def _unpack(commit: str | None, members: Iterator[tuple[str, Member]], dest: Path) -> Unpacked:
    if not is_commit_sha(commit):
        raise ArchiveFailed(
            "the archive does not say which commit it was cut from (no ZIP comment or pax comment): "
            "refusing to install code that cannot be identified"
        )
    listed = list(itertools.islice(members, MAX_MEMBERS + 1))
    if len(listed) > MAX_MEMBERS:
        raise ArchiveFailed(f"the archive has more than {MAX_MEMBERS} members")
    paths = [_relative(name) for name, _ in listed]
    prefix = _common_top(paths)
    dest.mkdir(mode=0o755)
    roots: set[str] = set()
    files: list[str] = []
    symlinks: list[tuple[PurePosixPath, str]] = []
    total = 0
    for path, (_, member) in zip(paths, listed, strict=True):
        path = PurePosixPath(*path.parts[prefix:])
        if not path.parts:
            continue  # the top directory itself
        roots.add(path.parts[0])
        target = dest.joinpath(*path.parts)
        if member.kind == "dir":
            target.mkdir(mode=0o755, parents=True, exist_ok=True)
        elif member.kind == "symlink":
            assert member.link is not None
            _check_link(path, member.link)
            symlinks.append((path, member.link))  # last: nothing is ever written through one
            files.append(path.as_posix())
        else:
            target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            total += _write_member(member, target, MAX_UNPACKED - total)
            files.append(path.as_posix())
    for path, link in symlinks:
        target = dest.joinpath(*path.parts)
        target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        os.symlink(link, target)
    if not roots:
        raise ArchiveFailed("the archive is empty")
    return Unpacked(dest, commit, frozenset(roots), tuple(files), total)


def _relative(name: str) -> PurePosixPath:
    if "\0" in name or "\\" in name:
        raise ArchiveUnsafe(f"archive member {name!r} has a character a path may not hold here")
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise ArchiveUnsafe(f"archive member {name!r} would land outside the tree")
    if ".git" in path.parts:
        raise ArchiveUnsafe(f"archive member {name!r} would write into .git")
    return path


def _common_top(paths: list[PurePosixPath]) -> int:
    """1 when every member sits under one top directory (``repo-<sha>/``), which is stripped."""
    tops = {p.parts[0] for p in paths}
    return 1 if len(tops) == 1 and any(len(p.parts) > 1 for p in paths) else 0


def _check_link(path: PurePosixPath, link: str) -> None:
    resolved = os.path.normpath(os.path.join(str(path.parent), link))
    if link.startswith("/") or resolved == ".." or resolved.startswith("../") or "\0" in link:
        raise ArchiveUnsafe(f"archive symlink {path} → {link!r} points outside the tree")


def _write_member(member: Member, target: Path, budget: int) -> int:
    assert member.open is not None
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755 if member.executable else 0o644)
    written = 0
    with os.fdopen(fd, "wb") as out, member.open() as source:
        while chunk := source.read(CHUNK):  # count what comes out: declared sizes can lie
            written += len(chunk)
            if written > budget:
                raise ArchiveFailed(f"the archive unpacks to more than {MAX_UNPACKED} bytes")
            out.write(chunk)
    return written
