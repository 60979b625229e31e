"""The canonical package archive: builds are reproducible, and the reader refuses everything
but the canonical form, each refusal with its own typed reason."""

from __future__ import annotations

import os
import tarfile

import pytest
import zstandard

from runtime_package import archive
from runtime_package.archive import ArchiveInvalid, Entry, build, check_path, digest, read

SAMPLE = [
    Entry("runtime.toml", b'schema = 1\nid = "sample"\n', False),
    Entry("bin/run", b"#!/bin/sh\nexec true\n", True),
    Entry("operator/pohunek/__init__.py", b'"""sample"""\n', False),
]
# The digest of SAMPLE's archive. Changing the zstandard pin or the format changes it, and so
# every package digest: that must be a deliberate decision, made here.
SAMPLE_DIGEST = "sha256:9423be5333de102abd891ba80a4271245c4be428e9e55684ea3fd463fa49894c"


def header(
    name: bytes,
    *,
    size: int = 0,
    mode: int = 0o644,
    typeflag: bytes = b"0",
    magic: bytes = b"ustar\x0000",
    uid: int = 0,
    mtime: int = 0,
    uname: bytes = b"",
    linkname: bytes = b"",
    prefix: bytes = b"",
    devmajor: int | None = None,
    size_field: bytes | None = None,
) -> bytes:
    """A raw USTAR header block with any field value, and its checksum right."""

    def num(value: int, width: int) -> bytes:
        return b"%0*o\0" % (width - 1, value)

    def text(value: bytes, width: int) -> bytes:
        return value + bytes(width - len(value))

    fields = [
        text(name, 100),
        num(mode, 8),
        num(uid, 8),
        num(0, 8),
        size_field if size_field is not None else num(size, 12),
        num(mtime, 12),
        b" " * 8,
        typeflag,
        text(linkname, 100),
        magic,
        text(uname, 32),
        text(b"", 32),
        # tarfile leaves the device fields empty for anything but a device
        text(b"", 8) if devmajor is None else num(devmajor, 8),
        text(b"", 8),
        text(prefix, 155),
    ]
    block = bytearray(text(b"".join(fields), 512))
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def member(name: bytes, data: bytes = b"", **fields: object) -> bytes:
    return header(name, size=len(data), **fields) + data + bytes(-len(data) % 512)


def tar_of(*members: bytes) -> bytes:
    return b"".join(members) + bytes(1024)


def zst(tar: bytes, **options: object) -> bytes:
    options = {"level": 19, "write_checksum": True, "write_content_size": True, **options}
    return zstandard.ZstdCompressor(**options).compress(tar)


def reason_of(data: bytes, expected_digest: str | None = None) -> str:
    with pytest.raises(ArchiveInvalid) as caught:
        read(data, expected_digest)
    assert caught.value.code == "package_archive_invalid"
    return caught.value.reason


def tarfile_member(info: tarfile.TarInfo, fmt: int) -> bytes:
    """The header blocks ``tarfile`` writes for one member without data in ``fmt``."""
    return info.tobuf(fmt, "utf-8", "surrogateescape")


# --- canonical form -----------------------------------------------------------------------------


def test_two_builds_are_byte_identical_whatever_the_input_order():
    assert build(SAMPLE) == build(reversed(SAMPLE))


def test_the_sample_digest_is_pinned():
    assert digest(build(SAMPLE)) == SAMPLE_DIGEST


def test_read_gives_the_entries_back_in_byte_order():
    entries = read(build(SAMPLE))
    assert entries == sorted(SAMPLE, key=lambda e: e.path.encode())
    assert [e.executable for e in entries] == [True, False, False]


def test_the_raw_header_helper_writes_the_canonical_header():
    tar = tar_of(member(b"bin/run", b"#!/bin/sh\n", mode=0o755))
    assert read(zst(tar)) == [Entry("bin/run", b"#!/bin/sh\n", True)]


def test_an_empty_package_round_trips():
    assert read(build([])) == []


def test_an_expected_digest_that_matches_passes():
    data = build(SAMPLE)
    assert len(read(data, digest(data))) == len(SAMPLE)


# --- entry types and extension headers ----------------------------------------------------------


def _typed(kind: bytes, linkname: str = "") -> bytes:
    info = tarfile.TarInfo("a")
    info.type = kind
    info.linkname = linkname
    return tarfile_member(info, tarfile.USTAR_FORMAT)


@pytest.mark.parametrize(
    "block",
    [
        _typed(tarfile.SYMTYPE, "target"),
        _typed(tarfile.LNKTYPE, "target"),
        _typed(tarfile.DIRTYPE),
        _typed(tarfile.FIFOTYPE),
        _typed(tarfile.CHRTYPE),
    ],
    ids=["symlink", "hard-link", "directory", "fifo", "device"],
)
def test_the_reader_refuses_anything_but_a_regular_file(block):
    assert reason_of(zst(tar_of(block))) == "not_regular_file"


def test_the_reader_refuses_a_pax_header():
    info = tarfile.TarInfo("a")
    info.pax_headers = {"comment": "x"}
    assert reason_of(zst(tar_of(tarfile_member(info, tarfile.PAX_FORMAT)))) == "pax_or_gnu_header"


def test_the_reader_refuses_a_global_pax_header():
    assert reason_of(zst(tar_of(member(b"pax_global_header", typeflag=b"g")))) == "pax_or_gnu_header"


def test_the_reader_refuses_a_gnu_long_name_header():
    block = tarfile_member(tarfile.TarInfo("a/" + "b" * 120), tarfile.GNU_FORMAT)
    assert reason_of(zst(tar_of(block))) == "pax_or_gnu_header"


@pytest.mark.parametrize("typeflag", [b"7", b"\0", b"S"])
def test_the_reader_refuses_an_unknown_type(typeflag):
    assert reason_of(zst(tar_of(member(b"a", typeflag=typeflag)))) == "bad_header"


def test_the_reader_refuses_a_header_without_the_ustar_magic():
    assert reason_of(zst(tar_of(member(b"a", magic=b"ustar  \0")))) == "bad_header"


@pytest.mark.parametrize("field", [b"0000000000x\0", b"\x80" + bytes(11), bytes(12)])
def test_the_reader_refuses_a_size_that_is_not_octal(field):
    assert reason_of(zst(tar_of(member(b"a", size_field=field)))) == "bad_header"


@pytest.mark.parametrize(
    "fields",
    [{"uid": 1}, {"mtime": 1}, {"mode": 0o600}, {"mode": 0o4755}, {"uname": b"root"}, {"linkname": b"x"}]
    + [{"devmajor": 1}, {"prefix": b"a"}],
    ids=["uid", "mtime", "mode", "setuid", "uname", "linkname", "devmajor", "prefix"],
)
def test_the_reader_refuses_any_other_metadata(fields):
    assert reason_of(zst(tar_of(member(b"b", b"x", **fields)))) == "non_canonical_header"


# --- paths and the rules between entries --------------------------------------------------------

BAD_PATHS = ["/abs", "..", "a/../b", ".", "./a", "a//b", "a/", "", "a\\b", "a b", "é", "a\nb", "x" * 101]


@pytest.mark.parametrize("path", BAD_PATHS)
def test_check_path_refuses_each_path_rule(path):
    with pytest.raises(ArchiveInvalid) as caught:
        check_path(path)
    assert caught.value.reason == "bad_path"


@pytest.mark.parametrize("path", [p for p in BAD_PATHS if len(p) <= 100])
def test_the_reader_refuses_each_path_rule(path):
    assert reason_of(zst(tar_of(member(path.encode("utf-8"), b"x")))) == "bad_path"


def test_the_reader_refuses_a_path_over_100_bytes_split_into_prefix():
    assert reason_of(zst(tar_of(member(b"b" * 50, b"x", prefix=b"a" * 60)))) == "bad_path"


@pytest.mark.parametrize("path", ["a", "a.b-c_D/9", "x" * 100, "..." + "/b"])
def test_check_path_accepts_good_paths(path):
    assert check_path(path) is None


@pytest.mark.parametrize(
    "names, reason, entry",
    [
        ((b"b", b"a"), "unsorted", 1),
        ((b"a", b"a"), "duplicate", 1),
        ((b"A", b"a"), "case_collision", 1),
        ((b"D/x", b"d/y"), "case_collision", 1),
        ((b"a", b"a/b"), "file_dir_conflict", 1),
        ((b"a-", b"a-/b"), "file_dir_conflict", 1),
    ],
)
def test_the_reader_refuses_entries_that_break_the_rules_between_them(names, reason, entry):
    with pytest.raises(ArchiveInvalid) as caught:
        read(zst(tar_of(*(member(n, b"x") for n in names))))
    assert (caught.value.reason, caught.value.detail) == (reason, {"reason": reason, "entry": entry})


@pytest.mark.parametrize(
    "paths, reason",
    [(["a", "a"], "duplicate"), (["A", "a"], "case_collision"), (["a/b", "a"], "file_dir_conflict")],
)
def test_build_refuses_entries_that_break_the_rules_between_them(paths, reason):
    with pytest.raises(ArchiveInvalid) as caught:
        build(Entry(p, b"x", False) for p in paths)
    assert caught.value.reason == reason


def test_an_error_names_the_entry_by_position_never_by_its_path():
    with pytest.raises(ArchiveInvalid) as caught:
        read(zst(tar_of(member(b"ok", b"x"), member(b"secret name", b"x"))))
    assert caught.value.detail == {"reason": "bad_path", "entry": 1}
    assert "secret" not in caught.value.message


# --- the tar stream -----------------------------------------------------------------------------


def test_the_reader_refuses_non_zero_padding():
    block = header(b"a", size=1) + b"x" + b"\1" + bytes(510)
    assert reason_of(zst(tar_of(block))) == "bad_padding"


def test_the_reader_refuses_data_after_the_tar_end():
    assert reason_of(zst(tar_of(member(b"a", b"x")) + bytes(512))) == "trailing_tar_data"


@pytest.mark.parametrize(
    "tar",
    [member(b"a", b"x") + bytes(512), member(b"a", b"x"), header(b"a", size=600) + bytes(512)],
    ids=["one-zero-block", "no-end", "inside-a-file"],
)
def test_the_reader_refuses_a_truncated_tar(tar):
    assert reason_of(zst(tar)) == "truncated"


# --- the zstd frame -----------------------------------------------------------------------------


def test_the_reader_refuses_data_after_the_frame():
    assert reason_of(build(SAMPLE) + b"\0") == "trailing_frame_data"


def test_the_reader_refuses_a_second_frame():
    assert reason_of(build(SAMPLE) + build(SAMPLE)) == "trailing_frame_data"


def test_the_reader_refuses_a_frame_without_a_checksum():
    assert reason_of(zst(tar_of(member(b"a", b"x")), write_checksum=False)) == "no_checksum"


def test_the_reader_refuses_a_wrong_checksum():
    data = bytearray(build(SAMPLE))
    data[-1] ^= 0x01  # the frame's last four bytes are its content checksum
    assert reason_of(bytes(data)) == "checksum_mismatch"


def test_the_reader_refuses_a_window_over_8_mib():
    params = zstandard.ZstdCompressionParameters(window_log=24, write_checksum=True, write_content_size=True)
    data = zstandard.ZstdCompressor(compression_params=params).compress(tar_of(member(b"a", bytes(9 * 2**20))))
    assert zstandard.get_frame_parameters(data).window_size > archive.MAX_WINDOW
    assert reason_of(data) == "window_too_large"


@pytest.mark.parametrize(
    "data",
    [b"", b"junk", b"PK\3\4" + bytes(100), b"\x50\x2a\x4d\x18" + bytes(8), b"\x28\xb5\x2f\xfd"],
    ids=["empty", "junk", "zip", "skippable-frame", "magic-only"],
)
def test_the_reader_refuses_what_is_not_a_zstd_frame(data):
    assert reason_of(data) == "not_zstd"


def test_the_reader_refuses_a_frame_that_does_not_end():
    assert reason_of(build(SAMPLE)[:-8]) == "truncated"


# --- limits, and the order they are checked in --------------------------------------------------


def test_the_compressed_size_is_checked_first():
    too_big = bytes(archive.MAX_COMPRESSED + 1)
    assert reason_of(too_big, expected_digest="sha256:" + "0" * 64) == "too_large"


def test_the_expected_digest_is_checked_before_decompressing():
    assert reason_of(b"not even zstd", expected_digest=digest(build(SAMPLE))) == "digest_mismatch"


def test_a_100x_bomb_is_refused():
    assert reason_of(zst(tar_of(member(b"a", bytes(2**20))))) == "ratio_exceeded"


def test_a_100x_bomb_without_a_declared_size_is_stopped_while_decompressing():
    assert reason_of(zst(tar_of(member(b"a", bytes(2**20))), write_content_size=False)) == "ratio_exceeded"


@pytest.mark.parametrize("declared", [True, False])
def test_a_tar_over_the_limit_is_refused(monkeypatch, declared):
    monkeypatch.setattr(archive, "MAX_TAR", 4096)
    data = zst(tar_of(member(b"a", os.urandom(8192))), write_content_size=declared)
    assert reason_of(data) == "too_large_decompressed"


def test_too_many_files_are_refused(monkeypatch):
    monkeypatch.setattr(archive, "MAX_FILES", 3)
    data = zst(tar_of(*(member(b"f%d" % i, b"x" * 200) for i in range(4))))
    with pytest.raises(ArchiveInvalid) as caught:
        read(data)
    assert caught.value.detail == {"reason": "too_many_files", "entry": 3}
    with pytest.raises(ArchiveInvalid, match="more than 3 files"):
        build(Entry(f"f{i}", b"x", False) for i in range(4))


def test_a_file_over_the_limit_is_refused(monkeypatch):
    monkeypatch.setattr(archive, "MAX_FILE", 100)
    assert reason_of(zst(tar_of(member(b"a", os.urandom(101))))) == "file_too_large"
    with pytest.raises(ArchiveInvalid) as caught:
        build([Entry("a", os.urandom(101), False)])
    assert caught.value.reason == "file_too_large"


def test_build_refuses_what_the_reader_would_refuse():
    with pytest.raises(ArchiveInvalid) as caught:
        build([Entry("a", bytes(2**20), False)])
    assert caught.value.reason == "ratio_exceeded"


def test_build_refuses_a_bad_path_by_its_position():
    with pytest.raises(ArchiveInvalid) as caught:
        build([Entry("ok", b"x", False), Entry("../escape", b"x", False)])
    assert caught.value.detail == {"reason": "bad_path", "entry": 1}
