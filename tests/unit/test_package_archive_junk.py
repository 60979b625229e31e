"""Junk never gets past the package archive reader as anything but its typed error: random
bytes, a valid archive with random edits, and a valid tar stream with random edits, compressed."""

from __future__ import annotations

import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime_package.archive import ArchiveInvalid, Entry, build, read
from tests.unit.test_package_archive import SAMPLE, zst

_VALID = build(SAMPLE)
_VALID_TAR = zstandard.ZstdDecompressor().decompress(_VALID)
_FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _mutate(base: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    out = bytearray(base)
    for kind, where, value in edits:
        at = where % (len(out) + 1)
        if kind == 0 and at < len(out):
            out[at] ^= value or 1
        elif kind == 1:
            out[at:at] = bytes([value])
        else:
            del out[at : at + value % 8 + 1]
    return bytes(out)


_EDITS = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2**20), st.integers(0, 255)), min_size=1, max_size=6)


REASONS = {
    "too_large", "digest_mismatch", "not_zstd", "window_too_large", "no_checksum", "checksum_mismatch",
    "corrupt_frame", "trailing_frame_data", "too_large_decompressed", "ratio_exceeded", "bad_header",
    "not_regular_file", "pax_or_gnu_header", "non_canonical_header", "bad_path", "case_collision",
    "file_dir_conflict", "unsorted", "duplicate", "too_many_files", "file_too_large", "bad_padding",
    "trailing_tar_data", "truncated",
}  # fmt: skip


def outcome(data: bytes) -> str:
    """The reason ``read`` refused ``data``, or "read" when it gave entries; any other exception
    escapes and fails the test."""
    try:
        entries = read(data)
    except ArchiveInvalid as exc:
        assert exc.detail is not None
        return str(exc.detail["reason"])
    return "read" if all(isinstance(e, Entry) for e in entries) else "not entries"


@_FUZZ
@given(st.binary(max_size=4096))
def test_random_bytes_only_raise_the_typed_error(data):
    assert outcome(data) in REASONS
    assert outcome(b"\x28\xb5\x2f\xfd" + data) in REASONS


@_FUZZ
@given(_EDITS)
def test_a_mutated_archive_only_raises_the_typed_error(edits):
    assert outcome(_mutate(_VALID, edits)) in REASONS | {"read"}


@_FUZZ
@given(_EDITS)
def test_a_mutated_tar_stream_only_raises_the_typed_error(edits):
    assert outcome(zst(_mutate(_VALID_TAR, edits), level=1)) in REASONS | {"read"}
