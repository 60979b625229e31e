"""The canonical runtime package archive: one zstd frame around a strict USTAR stream.

A runtime package's identity is the digest of its archive bytes, so one file set must always
give the same bytes (sorted regular files, fixed metadata, one pinned compressor at one level)
and the reader must accept nothing but those bytes: it rebuilds each entry's canonical header
and requires the actual one to match byte for byte. The reader checks the compressed size,
then the expected digest, and only then decompresses, into a bounded buffer, so a hostile
archive costs bounded memory. Pure: bytes in, bytes out; ``tarfile`` only writes headers and
never extracts.
"""

from __future__ import annotations

import hashlib
import re
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NoReturn

import zstandard

from runtime_package.package_errors import RuntimePackageError

MAX_COMPRESSED = 8 * 2**20
MAX_TAR = 64 * 2**20
MAX_RATIO = 100
MAX_FILES = 512
MAX_PATH = 100
MAX_FILE = 16 * 2**20
MAX_WINDOW = 8 * 2**20
ZSTD_LEVEL = 19

_BLOCK = 512
_END = bytes(2 * _BLOCK)
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_USTAR_MAGIC = b"ustar\x0000"
# Compressed bytes fed to the decompressor per step: a zstd block of a few bytes can expand to
# 128 KiB, so a small step keeps the output of one step (beyond the bound) to a few MiB.
_FEED = 256
_SEGMENT = re.compile(r"[A-Za-z0-9._-]+")
_OCTAL = re.compile(rb"[0-7]{1,11}")
_NOT_REGULAR = frozenset(b"123456")  # hard link, symlink, char and block device, directory, fifo
_EXTENSION = frozenset(b"xgLK")  # PAX extended (per file, global), GNU long name and long link
_REGULAR = ord("0")


class ArchiveInvalid(RuntimePackageError):
    """The archive (or the file set given to ``build``) breaks the format; ``detail["reason"]``
    says which rule, and ``detail["entry"]``, when present, the entry's position."""

    code = "package_archive_invalid"

    def __init__(self, reason: str, message: str, *, entry: int | None = None) -> None:
        detail: dict[str, object] = {"reason": reason}
        where = "package archive"
        if entry is not None:
            detail["entry"] = entry
            where = f"package archive entry {entry}"
        super().__init__(f"{where}: {message}", detail=detail)
        self.reason = reason
        self.entry = entry


@dataclass(frozen=True)
class Entry:
    path: str
    data: bytes
    executable: bool


def digest(archive: bytes) -> str:
    """The package digest: ``sha256:`` and the lowercase hex SHA-256 of the archive bytes."""
    return "sha256:" + hashlib.sha256(archive).hexdigest()


def check_path(path: str) -> None:
    """Refuse (``bad_path``) a path that breaks the path rules."""
    if not _path_ok(path):
        raise ArchiveInvalid("bad_path", "the path breaks the path rules")


def _path_ok(path: object) -> bool:
    # ASCII segments of a small set keep extraction identical on case-insensitive and
    # normalizing filesystems; the length is what a USTAR name field holds without a prefix.
    if not isinstance(path, str) or not path.isascii() or not 0 < len(path) <= MAX_PATH:
        return False
    return all(_SEGMENT.fullmatch(s) and s not in (".", "..") for s in path.split("/"))


# --- building -----------------------------------------------------------------------------------


def build(entries: Iterable[Entry]) -> bytes:
    """The canonical archive of ``entries`` (any order): every rule and limit is checked, and
    the result is read back with ``read`` so a built archive is always one the reader accepts."""
    given = list(entries)
    if len(given) > MAX_FILES:
        raise ArchiveInvalid("too_many_files", f"more than {MAX_FILES} files")
    for index, entry in enumerate(given):
        if not _path_ok(entry.path):
            raise ArchiveInvalid("bad_path", "the path breaks the path rules", entry=index)
        if len(entry.data) > MAX_FILE:
            raise ArchiveInvalid("file_too_large", f"a file is larger than {MAX_FILE} bytes", entry=index)
    ordered = sorted(given, key=lambda e: e.path.encode("ascii"))
    names = _Names()
    parts: list[bytes] = []
    for index, entry in enumerate(ordered):
        names.add(entry.path, index)
        parts.append(_header(entry.path, len(entry.data), entry.executable))
        parts.append(entry.data)
        parts.append(bytes(-len(entry.data) % _BLOCK))
    parts.append(_END)
    tar = b"".join(parts)
    if len(tar) > MAX_TAR:
        raise ArchiveInvalid("too_large_decompressed", f"the tar stream is larger than {MAX_TAR} bytes")
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True, write_content_size=True)
    archive = compressor.compress(tar)
    # Reading back applies the reader's limits (ratio, compressed size) and catches a writer
    # that drifted from the reader: a built archive is always one every reader accepts.
    if read(archive) != ordered:
        raise AssertionError("the archive built does not read back as its entries")
    return archive


def _header(path: str, size: int, executable: bool) -> bytes:
    info = tarfile.TarInfo(path)
    info.size = size
    info.mode = 0o755 if executable else 0o644
    info.type = tarfile.REGTYPE
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.linkname = ""
    info.devmajor = info.devminor = 0
    return info.tobuf(tarfile.USTAR_FORMAT, "ascii", "strict")


class _Names:
    """The paths seen so far, for the rules between entries: byte order, no duplicate, no two
    spellings of one path or directory, and no path that is both a file and a directory."""

    def __init__(self) -> None:
        self._last: bytes | None = None
        self._seen: dict[str, tuple[str, bool]] = {}  # casefolded -> (spelling, is a file)

    def add(self, path: str, index: int) -> None:
        raw = path.encode("ascii")
        if self._last is not None and raw == self._last:
            raise ArchiveInvalid("duplicate", "a path occurs twice", entry=index)
        if self._last is not None and raw < self._last:
            raise ArchiveInvalid("unsorted", "entries are not in byte order of their paths", entry=index)
        self._last = raw
        segments = path.split("/")
        for depth in range(1, len(segments) + 1):
            name = "/".join(segments[:depth])
            self._claim(name, depth == len(segments), index)

    def _claim(self, name: str, is_file: bool, index: int) -> None:
        folded = name.lower()
        seen = self._seen.get(folded)
        if seen is None:
            self._seen[folded] = (name, is_file)
            return
        spelling, was_file = seen
        if spelling != name:
            raise ArchiveInvalid("case_collision", "two paths differ only by letter case", entry=index)
        if is_file or was_file:
            raise ArchiveInvalid("file_dir_conflict", "a path is both a file and a directory", entry=index)


# --- reading ------------------------------------------------------------------------------------


def read(archive: bytes, expected_digest: str | None = None) -> list[Entry]:
    """The entries of a canonical archive, in byte order of their paths; anything else raises
    ArchiveInvalid. The size is checked first, then ``expected_digest``, then the frame."""
    if len(archive) > MAX_COMPRESSED:
        raise ArchiveInvalid("too_large", f"the archive is larger than {MAX_COMPRESSED} bytes")
    if expected_digest is not None and digest(archive) != expected_digest:
        raise ArchiveInvalid("digest_mismatch", "the archive's digest is not the expected one")
    return _read_tar(_decompress(archive))


def _decompress(archive: bytes) -> bytes:
    if not archive.startswith(_ZSTD_MAGIC):
        raise ArchiveInvalid("not_zstd", "not a zstd frame")
    try:
        params = zstandard.get_frame_parameters(archive)
    except zstandard.ZstdError:
        raise ArchiveInvalid("not_zstd", "the zstd frame header is unreadable") from None
    if not params.has_checksum:
        raise ArchiveInvalid("no_checksum", "the zstd frame has no content checksum")
    if params.window_size > MAX_WINDOW:
        raise ArchiveInvalid("window_too_large", f"the zstd window is larger than {MAX_WINDOW} bytes")
    bound = min(MAX_TAR, MAX_RATIO * len(archive))
    if params.content_size != zstandard.CONTENTSIZE_UNKNOWN and params.content_size > bound:
        _over_bound(params.content_size)
    stream = zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW).decompressobj()
    out = bytearray()
    offset = 0
    try:
        while offset < len(archive) and not stream.eof:
            out += stream.decompress(archive[offset : offset + _FEED])
            offset += _FEED
            if len(out) > bound:
                _over_bound(len(out))
    except zstandard.ZstdError as exc:
        # The pinned libzstd names a checksum failure in its message; no error code is exposed.
        if "checksum" in str(exc):
            raise ArchiveInvalid("checksum_mismatch", "the zstd content checksum does not match") from None
        raise ArchiveInvalid("corrupt_frame", "the zstd frame is corrupt") from None
    if not stream.eof:
        raise ArchiveInvalid("truncated", "the zstd frame does not end")
    if stream.unused_data or offset < len(archive):
        raise ArchiveInvalid("trailing_frame_data", "data follows the zstd frame")
    return bytes(out)


def _over_bound(size: int) -> NoReturn:
    if size > MAX_TAR:
        raise ArchiveInvalid("too_large_decompressed", f"the tar stream is larger than {MAX_TAR} bytes")
    raise ArchiveInvalid("ratio_exceeded", f"the archive expands more than {MAX_RATIO} times")


def _read_tar(tar: bytes) -> list[Entry]:
    entries: list[Entry] = []
    names = _Names()
    offset = 0
    while True:
        block = tar[offset : offset + _BLOCK]
        if len(block) < _BLOCK:
            raise ArchiveInvalid("truncated", "the tar stream ends before its end marker")
        if block == bytes(_BLOCK):
            _check_end(tar[offset:])
            return entries
        index = len(entries)
        if index >= MAX_FILES:
            raise ArchiveInvalid("too_many_files", f"more than {MAX_FILES} files", entry=index)
        path, size, executable = _parse_header(block, index)
        names.add(path, index)
        start = offset + _BLOCK
        end = start + size
        padded = start + size + (-size % _BLOCK)
        if padded > len(tar):
            raise ArchiveInvalid("truncated", "the tar stream ends inside a file", entry=index)
        if any(tar[end:padded]):
            raise ArchiveInvalid("bad_padding", "the padding after a file is not zero", entry=index)
        entries.append(Entry(path, tar[start:end], executable))
        offset = padded


def _check_end(rest: bytes) -> None:
    if len(rest) < len(_END) or any(rest[: len(_END)]):
        raise ArchiveInvalid("truncated", "the tar end marker is not two zero blocks")
    if len(rest) > len(_END):
        raise ArchiveInvalid("trailing_tar_data", "data follows the tar end marker")


def _parse_header(block: bytes, index: int) -> tuple[str, int, bool]:
    """(path, size, executable) of a header that is exactly the canonical one for them."""
    typeflag = block[156]
    if typeflag in _EXTENSION:
        raise ArchiveInvalid("pax_or_gnu_header", "a PAX or GNU extension header", entry=index)
    if typeflag in _NOT_REGULAR:
        raise ArchiveInvalid("not_regular_file", "an entry is not a regular file", entry=index)
    if typeflag != _REGULAR:
        raise ArchiveInvalid("bad_header", "an entry has an unknown type", entry=index)
    if block[257:265] != _USTAR_MAGIC:
        raise ArchiveInvalid("bad_header", "a header is not USTAR", entry=index)
    name = _field(block[0:100])
    prefix = _field(block[345:500])
    raw_path = prefix + b"/" + name if prefix else name
    try:
        path = raw_path.decode("ascii")
    except UnicodeDecodeError:
        raise ArchiveInvalid("bad_path", "the path breaks the path rules", entry=index) from None
    if not _path_ok(path):
        raise ArchiveInvalid("bad_path", "the path breaks the path rules", entry=index)
    mode, size = _octal(block[100:108], index), _octal(block[124:136], index)
    if mode not in (0o644, 0o755):
        _non_canonical(index)
    if size > MAX_FILE:
        raise ArchiveInvalid("file_too_large", f"a file is larger than {MAX_FILE} bytes", entry=index)
    executable = mode == 0o755
    if block != _header(path, size, executable):
        _non_canonical(index)
    return path, size, executable


def _field(raw: bytes) -> bytes:
    return raw.split(b"\0", 1)[0]


def _octal(raw: bytes, index: int) -> int:
    digits = _field(raw)
    if not _OCTAL.fullmatch(digits):
        raise ArchiveInvalid("bad_header", "a numeric header field is not octal", entry=index)
    return int(digits, 8)


def _non_canonical(index: int) -> NoReturn:
    raise ArchiveInvalid("non_canonical_header", "a header is not the canonical one", entry=index)
