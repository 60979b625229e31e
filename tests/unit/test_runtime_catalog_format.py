"""The catalog's bytes: the strict JSON subset, canonical JSON, the strict Ed25519 key rules,
the trust anchor file, and junk or mutated documents (runtime_package/catalog.py and the
modules it re-exports)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime_package import ed25519
from runtime_package.catalog import (
    MAX_CATALOG_BYTES,
    CatalogError,
    CatalogInvalid,
    TrustUnavailable,
    anchor_document,
    canonical_json,
    key_id,
    key_record,
    parse_anchor,
    sign_catalog,
    strict_loads,
    verify,
)
from tests.unit.test_runtime_catalog import CHILD, DAY, NOW, ROOT, anchor_of, body, check, entry, pub

# --- strict parse -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b'{"a":1,"a":2}', "duplicate_key"),
        (b'{"a":[{"k":1,"k":1}]}', "duplicate_key"),
        (b"1.5", "unsupported_number"),
        (b"1.0", "unsupported_number"),
        (b"1e3", "unsupported_number"),
        (b"-1", "unsupported_number"),
        (b"-0", "unsupported_number"),
        (b"18446744073709551616", "unsupported_number"),
        (b"NaN", "unsupported_number"),
        (b"[Infinity]", "unsupported_number"),
        (b"-Infinity", "unsupported_number"),
        (b"{} {}", "syntax"),
        (b"{}x", "syntax"),
        (b"", "syntax"),
        (b"\xef\xbb\xbf{}", "syntax"),
        (b'"\xff"', "not_utf8"),
        (b'["\\ud800"]', "lone_surrogate"),
        (b"[" * 40 + b"]" * 40, "too_deep"),
        (b" " * (MAX_CATALOG_BYTES + 1), "too_large"),
    ],
)
def test_strict_loads_refuses_everything_outside_the_subset(data, why):
    with pytest.raises(CatalogInvalid) as exc:
        strict_loads(data)
    assert exc.value.reason == why


def test_strict_loads_reads_the_subset():
    assert strict_loads(b' {"b": [1, true, null, "\\u00e9"], "a": 18446744073709551615} ') == {
        "b": [1, True, None, "é"],
        "a": 2**64 - 1,
    }
    assert strict_loads(b'"' + b"[" * 40 + b'"') == "[" * 40  # brackets in a string are not nesting


def test_a_catalog_over_one_mebibyte_is_refused_before_parsing():
    document = sign_catalog(body(), ROOT)
    with pytest.raises(CatalogInvalid) as exc:
        check(document[:-1] + b" " * (MAX_CATALOG_BYTES - len(document) + 2))
    assert exc.value.reason == "too_large"


def mutate(document: bytes, path: tuple[Any, ...], value: Any) -> bytes:
    parsed = json.loads(document)
    target = parsed
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return json.dumps(parsed).encode()


UNKNOWN = [(), ("catalog",), ("catalog", "entries", 0), ("key_chain", 0), ("signatures", 0)]


@pytest.mark.parametrize("where", UNKNOWN)
def test_every_object_refuses_an_unknown_field(where):
    chain = [key_record(pub(CHILD), NOW - DAY, NOW + DAY, ROOT)]
    with pytest.raises(CatalogInvalid):
        check(mutate(sign_catalog(body(), CHILD, key_chain=chain), (*where, "extra"), 1))


@pytest.mark.parametrize(
    "path",
    [
        ("catalog", "entries", 0, "digest"),
        ("signatures", 0, "key_id"),
        ("signatures", 0, "signature"),
        ("key_chain", 0, "public_key"),
        ("key_chain", 0, "endorsed_by"),
    ],
)
def test_uppercase_hex_is_refused(path):
    document = sign_catalog(body(), CHILD, key_chain=[key_record(pub(CHILD), NOW - DAY, NOW + DAY, ROOT)])
    value = json.loads(document)
    for step in path:
        value = value[step]
    with pytest.raises(CatalogInvalid):
        check(mutate(document, path, value.upper()))


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("catalog", "sequence"), True),
        (("catalog", "sequence"), "5"),
        (("catalog", "schema_version"), 2),
        (("schema_version",), 2),
        (("catalog", "entries"), {}),
        (("catalog", "entries", 0, "platforms"), "x86_64-unknown-linux-gnu"),
        (("catalog", "entries", 0, "package_id"), "Pohunek"),
        (("catalog", "entries", 0, "package_id"), ".hidden"),
        (("catalog", "entries", 0, "runtime_id"), "a..b"),
        (("catalog", "entries", 0, "version"), "1 0"),
        (("catalog", "entries", 0, "digest"), "sha512:" + "ab" * 32),
        (("catalog", "entries"), [entry(version=str(n)) for n in range(257)]),
        (("signatures",), [{"key_id": "0" * 64, "signature": "0" * 128}] * 9),
    ],
)
def test_a_field_out_of_its_form_or_limit_is_invalid(path, value):
    with pytest.raises(CatalogInvalid):
        check(mutate(sign_catalog(body(), ROOT), path, value))


def test_whitespace_key_order_and_escapes_in_the_file_do_not_matter():
    document = json.loads(sign_catalog(body(), ROOT))

    def reversed_keys(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: reversed_keys(value[k]) for k in sorted(value, reverse=True)}
        return [reversed_keys(v) for v in value] if isinstance(value, list) else value

    pretty = json.dumps(reversed_keys(document), indent=4, ensure_ascii=True).replace(">=", "\\u003e=")
    assert "\\u003e=" in pretty
    assert check(pretty.encode()).sequence == 5


# --- canonical JSON ---------------------------------------------------------------------------


def test_canonical_json_escapes_like_serde_json():
    controls = "".join(chr(c) for c in range(0x20))
    expected = (
        '"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000b\\f\\r\\u000e\\u000f'
        '\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018\\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f"'
    )
    assert canonical_json(controls) == expected.encode()
    assert canonical_json('"\\/\x7f\u2028é😀') == '"\\"\\\\/\x7f\u2028é😀"'.encode()


def test_canonical_json_sorts_keys_by_bytes_and_drops_whitespace():
    value = {"b": 1, "a": [{"y": True, "x": None}, "s"], "é": 0, "Z": False, "": []}
    assert canonical_json(value) == '{"":[],"Z":false,"a":[{"x":null,"y":true},"s"],"b":1,"é":0}'.encode()


@pytest.mark.parametrize("value", [1.5, float("nan"), {1: 2}, ("a",), "\ud800", 2**64, b"bytes"])
def test_canonical_json_refuses_what_has_no_canonical_form(value):
    with pytest.raises(CatalogInvalid):
        canonical_json(value)


# --- strict Ed25519 ---------------------------------------------------------------------------

_P = 2**255 - 19
_D = -121665 * pow(121666, -1, _P) % _P


def _decode(encoding: bytes) -> tuple[int, int]:
    y = int.from_bytes(encoding, "little") & ((1 << 255) - 1)
    x2 = (y * y - 1) * pow(_D * y * y + 1, -1, _P) % _P
    x = pow(x2, (_P + 3) // 8, _P)
    if (x * x - x2) % _P:
        x = x * pow(2, (_P - 1) // 4, _P) % _P
    assert (x * x - x2) % _P == 0, "not a point"
    return (_P - x if x & 1 != encoding[31] >> 7 else x), y


def _add(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    t = _D * a[0] * b[0] * a[1] * b[1] % _P
    x = (a[0] * b[1] + a[1] * b[0]) * pow(1 + t, -1, _P) % _P
    y = (a[1] * b[1] + a[0] * b[0]) * pow(1 - t, -1, _P) % _P
    return x, y


def _times_eight(point: tuple[int, int]) -> tuple[int, int]:
    for _ in range(3):
        point = _add(point, point)
    return point


def test_the_listed_encodings_are_exactly_small_order_points():
    assert len(ed25519.SMALL_ORDER_ENCODINGS) == 8
    assert all(_times_eight(_decode(e)) == (0, 1) for e in ed25519.SMALL_ORDER_ENCODINGS)
    assert _times_eight(_decode(pub(ROOT))) != (0, 1)


def test_openssl_alone_accepts_a_forgery_with_the_identity_key_and_the_strict_check_refuses_it():
    identity = bytes.fromhex("01" + "00" * 31)
    forged = identity + bytes(32)  # R = identity, S = 0 verifies for any message
    Ed25519PublicKey.from_public_bytes(identity).verify(forged, b"any message")
    assert ed25519.verify(identity, forged, b"any message") is False


@pytest.mark.parametrize("encoding", sorted(ed25519.SMALL_ORDER_ENCODINGS))
def test_a_small_order_key_is_refused_as_root_and_as_chained_key(encoding):
    with pytest.raises(TrustUnavailable):
        parse_anchor(anchor_document([(encoding, 0, NOW + DAY)]))
    record = key_record(encoding, NOW - DAY, NOW + DAY, ROOT)
    with pytest.raises(CatalogInvalid):
        check(sign_catalog(body(), ROOT, key_chain=[record]))


@pytest.mark.parametrize(
    "encoding",
    ["01" + "00" * 30 + "80", "ec" + "ff" * 30 + "ff", "ed" + "ff" * 30 + "7f", "ee" + "ff" * 30 + "7f"],
)
def test_non_canonical_encodings_of_small_order_points_are_refused(encoding):
    assert ed25519.is_usable_point(bytes.fromhex(encoding)) is False


# --- the trust anchor -------------------------------------------------------------------------


def test_an_anchor_round_trips():
    anchor = parse_anchor(anchor_document([(pub(ROOT), 10, 20)], [key_id(pub(CHILD))]))
    assert [(r.key_id, r.public_key, r.not_before, r.not_after) for r in anchor.roots] == [
        (key_id(pub(ROOT)), pub(ROOT), 10, 20)
    ]
    assert anchor.revoked_key_ids == frozenset({key_id(pub(CHILD))})


def _anchor_with(**changes: Any) -> bytes:
    document = json.loads(anchor_document([(pub(ROOT), 10, 20)]))
    for name, value in changes.items():
        if name in document:
            document[name] = value
        else:
            document["roots"][0][name] = value
    return json.dumps(document).encode()


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not json",
        _anchor_with(key_id="0" * 64),
        _anchor_with(public_key=pub(ROOT).hex().upper()),
        _anchor_with(not_after=10),
        _anchor_with(roots=[]),
        _anchor_with(schema_version=2),
        _anchor_with(revoked_key_ids=["x"]),
        _anchor_with(extra=1),
        anchor_document([(pub(ROOT), 10, 20)] * 2),
        anchor_document([(pub(bytes([n]) * 32), 10, 20) for n in range(9)]),
    ],
)
def test_an_unusable_anchor_is_trust_unavailable(data):
    with pytest.raises(TrustUnavailable):
        parse_anchor(data)


# --- junk and mutations -----------------------------------------------------------------------

GOOD = sign_catalog(body(), CHILD, key_chain=[key_record(pub(CHILD), NOW - DAY, NOW + DAY, ROOT)])
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 2**65) | st.text(max_size=8) | st.floats(allow_nan=True),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    return [prefix] + [p for key, child in children for p in _paths(child, (*prefix, key))]


GOOD_PATHS = [p for p in _paths(json.loads(GOOD)) if p]


@settings(max_examples=300)
@given(st.binary(max_size=512))
def test_junk_bytes_only_ever_raise_a_catalog_error(data):
    with pytest.raises(CatalogError):
        verify(data, anchor_of(ROOT), now=NOW, high_water=None)
    with pytest.raises(TrustUnavailable):
        parse_anchor(data)


@settings(max_examples=300)
@given(st.integers(0, len(GOOD) - 1), st.binary(min_size=0, max_size=3), st.integers(0, 3))
def test_mutated_bytes_only_ever_raise_a_catalog_error(position, insert, cut):
    mutated = GOOD[:position] + insert + GOOD[position + cut :]
    try:
        verified = verify(mutated, anchor_of(ROOT), now=NOW, high_water=None)
    except CatalogError as exc:
        assert exc.detail is not None and "reason" in exc.detail
    else:
        assert verified.entries  # only a spelling change of the same signed catalog can pass


@settings(max_examples=300)
@given(st.sampled_from(GOOD_PATHS), JSON_VALUES)
def test_mutated_documents_only_ever_raise_a_catalog_error(path, value):
    document = json.loads(GOOD)
    target = document
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    mutated = json.dumps(document).encode()
    try:
        verify(mutated, anchor_of(ROOT), now=NOW, high_water=None)
    except CatalogError as exc:
        assert exc.detail is not None and "reason" in exc.detail
    else:
        assert json.loads(mutated) == json.loads(GOOD)
