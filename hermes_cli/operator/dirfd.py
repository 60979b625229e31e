"""The installer's file-system steps, each made relative to an open directory, never through a link.

A directory is opened from its parent's descriptor with ``O_NOFOLLOW``, down from a root the
caller trusts (the Hermes home, the Pohunek state), so nothing the installer writes or removes
is reached through a link it did not make: a link (or a file) where a directory must be is
``integration_path_unsafe``; a link inside a tree being removed is removed as the link. Every
directory the installer makes is 0700. Each change is one ``shared.faults.step``, so a crash test
can kill the process before any of them.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from hermes_cli.operator.errors import IntegrationError
from shared import faults, files

_TEMP_SUFFIX = ".tmp"
_TEMP_TOKEN_BYTES = 8
_TEMP_TOKEN = re.compile(f"[0-9a-f]{{{2 * _TEMP_TOKEN_BYTES}}}")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(IntegrationError):
    code = "integration_path_unsafe"


def unsafe(path: Path, reason: str) -> UnsafePath:
    return UnsafePath(f"{path} is {reason}: the installer goes through no link", detail={"path": str(path)})


class Dir:
    """An open directory, and the path it was reached by (for messages only)."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path

    @classmethod
    def root(cls, path: Path, *, follow: bool = False) -> Dir:
        """A directory the caller trusts by its path: itself not a link, unless ``follow``."""
        flags = _DIR_FLAGS & ~os.O_NOFOLLOW if follow else _DIR_FLAGS
        try:
            return cls(os.open(path, flags), path)
        except OSError:
            raise unsafe(path, "missing, a link or not a directory") from None

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> Dir:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- reading ----------------------------------------------------------------------------

    def kind(self, name: str) -> str | None:
        """``dir``, ``file``, ``link`` or ``other`` for the entry itself; None when it is missing."""
        try:
            mode = os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(mode):
            return "link"
        return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"

    def names(self) -> list[str]:
        return sorted(os.listdir(self.fd))

    def sub(self, name: str) -> Dir | None:
        """The directory ``name`` here; None when it is missing."""
        try:
            return Dir(os.open(name, _DIR_FLAGS, dir_fd=self.fd), self.path / name)
        except FileNotFoundError:
            return None
        except OSError:
            raise unsafe(self.path / name, "a link or not a directory") from None

    def ensure(self, name: str) -> Dir:
        """The directory ``name`` here, made (0700) when it is missing."""
        if self.kind(name) is None:
            self.make_dir(name)
        made = self.sub(name)
        if made is None:
            raise unsafe(self.path / name, "gone as it was made")
        return made

    def read(self, name: str, limit: int) -> bytes | None:
        """A regular file's first ``limit`` + 1 bytes; None when it is missing."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=self.fd)
        except FileNotFoundError:
            return None
        except OSError:
            raise unsafe(self.path / name, "a link") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise unsafe(self.path / name, "not a regular file")
            return os.read(fd, limit + 1)
        finally:
            os.close(fd)

    # --- changing: each one step --------------------------------------------------------------

    def make_dir(self, name: str) -> None:
        """A new directory, exactly 0700; an entry already there is refused."""
        faults.step()
        try:
            os.mkdir(name, files.PRIVATE_DIR_MODE, dir_fd=self.fd)
        except FileExistsError:
            raise unsafe(self.path / name, "already there") from None
        fd = os.open(name, _DIR_FLAGS, dir_fd=self.fd)
        try:
            os.fchmod(fd, files.PRIVATE_DIR_MODE)  # the umask may have narrowed the mode
        finally:
            os.close(fd)
        self.fsync()

    def make_private(self) -> None:
        """This directory exactly 0700."""
        if stat.S_IMODE(os.fstat(self.fd).st_mode) != files.PRIVATE_DIR_MODE:
            faults.step()
            os.fchmod(self.fd, files.PRIVATE_DIR_MODE)

    def write_new(self, name: str, data: bytes, mode: int) -> None:
        """A new file holding ``data`` with ``mode``, synced; an entry already there is refused."""
        faults.step()
        self._create(name, data, mode)
        self.fsync()

    def replace(self, name: str, data: bytes, mode: int) -> None:
        """``name`` holds ``data`` atomically: a temporary file renamed over it (a link there is
        replaced, never followed)."""
        faults.step()
        temp = f"{_temp_prefix(name)}{secrets.token_hex(_TEMP_TOKEN_BYTES)}{_TEMP_SUFFIX}"
        self._create(temp, data, mode)
        try:
            os.rename(temp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            os.unlink(temp, dir_fd=self.fd)
            raise
        self.fsync()

    def sweep_temps(self, name: str) -> None:
        """The temporary files of ``replace(name, …)`` that a crash between writing one and
        renaming it left behind; only a caller sure that their writer is gone may sweep."""
        prefix = _temp_prefix(name)
        for entry in self.names():
            token = entry[len(prefix) : -len(_TEMP_SUFFIX)]
            if entry == f"{prefix}{token}{_TEMP_SUFFIX}" and _TEMP_TOKEN.fullmatch(token):
                self.remove_entry(entry)

    def rename(self, name: str, into: Dir, new: str) -> None:
        faults.step()
        os.rename(name, new, src_dir_fd=self.fd, dst_dir_fd=into.fd)
        into.fsync()
        if into.fd != self.fd:
            self.fsync()

    def remove(self, name: str) -> None:
        """Whatever is at ``name``: a tree (each entry a step), a file, or a link as the link."""
        kind = self.kind(name)
        if kind == "dir":
            inner = self.sub(name)
            if inner is not None:
                with inner:
                    for entry in inner.names():
                        inner.remove(entry)
            faults.step()
            os.rmdir(name, dir_fd=self.fd)
        elif kind is not None:
            faults.step()
            os.unlink(name, dir_fd=self.fd)

    def remove_entry(self, name: str) -> None:
        """A file or a link at ``name`` (the link itself); a directory there stays."""
        if self.kind(name) not in (None, "dir"):
            faults.step()
            os.unlink(name, dir_fd=self.fd)

    def remove_empty_dir(self, name: str) -> None:
        """The directory ``name`` when it is empty; one with anything in it stays."""
        if self.kind(name) != "dir":
            return
        faults.step()
        try:
            os.rmdir(name, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise

    def fsync(self) -> None:
        os.fsync(self.fd)

    def _create(self, name: str, data: bytes, mode: int) -> None:
        try:
            files.create_in(self.fd, name, data, mode)
        except FileExistsError:
            raise unsafe(self.path / name, "already there") from None


def _temp_prefix(name: str) -> str:
    return f".{name}."


def descend(top: Dir, parts: Sequence[str], *, create: bool = False) -> Dir | None:
    """The directory ``top/parts…`` as a new open directory the caller closes (each missing one
    made 0700 with ``create``); None when one is missing."""
    here = Dir(os.dup(top.fd), top.path)
    for part in parts:
        with here:
            below = here.ensure(part) if create else here.sub(part)
        if below is None:
            return None
        here = below
    return here
