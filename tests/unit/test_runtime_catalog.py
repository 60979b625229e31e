"""The signed runtime catalog: signatures, the key chain, revocation, expiry, anti-rollback,
entry rules and authorization (runtime_package/catalog.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from runtime_package import ed25519
from runtime_package.catalog import (
    CatalogError,
    CatalogExpired,
    CatalogInvalid,
    CatalogRollback,
    CatalogUntrusted,
    NotAuthorized,
    TrustUnavailable,
    VerifiedCatalog,
    anchor_document,
    explicit_digest_allows,
    host_platform,
    key_id,
    key_record,
    parse_anchor,
    sign_catalog,
    verify,
)

NOW = 1_800_000_000
DAY = 86400
ROOT, OTHER, CHILD, GRANDCHILD = (bytes([n]) * 32 for n in (1, 2, 3, 4))
PLATFORM = "x86_64-unknown-linux-gnu"
DIGEST = "sha256:" + "ab" * 32


def pub(seed: bytes) -> bytes:
    return ed25519.public_bytes(seed)


def kid(seed: bytes) -> str:
    return key_id(pub(seed))


def anchor_of(*roots: bytes, window: tuple[int, int] = (NOW - DAY, NOW + DAY), revoked: tuple[bytes, ...] = ()):
    return parse_anchor(anchor_document([(pub(r), *window) for r in roots], [kid(r) for r in revoked]))


def entry(**changes: Any) -> dict[str, Any]:
    return {
        "package_id": "pohunek.runtime.hermes",
        "runtime_id": "hermes",
        "version": "1.0.0",
        "digest": DIGEST,
        "platforms": [PLATFORM],
        "core": ">=0.1.0, <0.2.0",
        **changes,
    }


def body(**changes: Any) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "sequence": 5,
        "expires_at": NOW + DAY,
        "revoked_key_ids": [],
        "revoked_digests": [],
        "entries": [entry()],
        **changes,
    }


def check(document: bytes, anchor=None, *, high_water: int | None = None, revoked=frozenset(), now=NOW):
    return verify(document, anchor or anchor_of(ROOT), now=now, high_water=high_water, revoked_key_ids=revoked)


def reason(exc: pytest.ExceptionInfo[CatalogError]) -> str:
    return exc.value.reason


def test_a_catalog_signed_by_a_root_passes():
    verified = check(sign_catalog(body(), ROOT))
    assert (verified.sequence, verified.expires_at) == (5, NOW + DAY)
    assert [e.digest for e in verified.entries] == [DIGEST]
    assert verified.entries[0].platforms == (PLATFORM,)


def test_a_key_outside_the_anchor_is_untrusted():
    with pytest.raises(CatalogUntrusted) as exc:
        check(sign_catalog(body(), OTHER))
    assert reason(exc) == "unknown_signer"


def test_a_catalog_changed_after_signing_is_untrusted():
    document = json.loads(sign_catalog(body(), ROOT))
    document["catalog"]["sequence"] = 6
    with pytest.raises(CatalogUntrusted) as exc:
        check(json.dumps(document).encode())
    assert reason(exc) == "bad_signature"


def test_one_good_signature_among_bad_ones_is_enough():
    document = json.loads(sign_catalog(body(), ROOT))
    stranger = json.loads(sign_catalog(body(), OTHER))["signatures"][0]
    document["signatures"].insert(0, stranger)
    assert check(json.dumps(document).encode()).sequence == 5


def test_signatures_repeating_a_key_id_are_invalid():
    document = json.loads(sign_catalog(body(), ROOT))
    document["signatures"] *= 2
    with pytest.raises(CatalogInvalid):
        check(json.dumps(document).encode())


def test_a_catalog_without_signatures_is_untrusted():
    document = json.loads(sign_catalog(body(), ROOT))
    document["signatures"] = []
    with pytest.raises(CatalogUntrusted) as exc:
        check(json.dumps(document).encode())
    assert reason(exc) == "no_signatures"


@pytest.mark.parametrize(
    ("anchor_revokes", "argument_revokes", "catalog_revokes", "expected"),
    [
        (True, False, False, "signer_revoked"),
        (False, True, False, "signer_revoked"),
        (False, False, True, "signer_revoked_by_catalog"),
    ],
)
def test_a_revoked_signer_is_untrusted(anchor_revokes, argument_revokes, catalog_revokes, expected):
    anchor = anchor_of(ROOT, revoked=(ROOT,) if anchor_revokes else ())
    revoked = frozenset({kid(ROOT)}) if argument_revokes else frozenset()
    document = sign_catalog(body(revoked_key_ids=[kid(ROOT)] if catalog_revokes else []), ROOT)
    with pytest.raises(CatalogUntrusted) as exc:
        check(document, anchor, revoked=revoked)
    assert reason(exc) == expected


def test_a_catalog_revoking_its_signers_root_is_refused():
    chain = [key_record(pub(CHILD), NOW - DAY, NOW + DAY, ROOT)]
    with pytest.raises(CatalogUntrusted) as exc:
        check(sign_catalog(body(revoked_key_ids=[kid(ROOT)]), CHILD, key_chain=chain))
    assert reason(exc) == "signer_revoked_by_catalog"


def test_revoking_an_unrelated_key_keeps_the_catalog_and_reports_it():
    verified = check(sign_catalog(body(revoked_key_ids=[kid(OTHER)]), ROOT))
    assert verified.revoked_key_ids == frozenset({kid(OTHER)})


@pytest.mark.parametrize(
    ("window", "expected"),
    [
        ((NOW - 2 * DAY, NOW - DAY), "signer_expired"),
        ((NOW - DAY, NOW), "signer_expired"),
        ((NOW + 1, NOW + DAY), "signer_not_yet_valid"),
    ],
)
def test_a_root_outside_its_window_signs_nothing(window, expected):
    with pytest.raises(CatalogUntrusted) as exc:
        check(sign_catalog(body(), ROOT), anchor_of(ROOT, window=window))
    assert reason(exc) == expected


def test_an_expired_root_ends_every_key_chained_from_it():
    chain = [key_record(pub(CHILD), NOW - DAY, NOW + DAY, ROOT)]
    with pytest.raises(CatalogUntrusted) as exc:
        check(sign_catalog(body(), CHILD, key_chain=chain), anchor_of(ROOT, window=(NOW - 2 * DAY, NOW - DAY)))
    assert reason(exc) == "signer_expired"


def test_a_rotated_key_signs_through_the_chain():
    chain = [
        key_record(pub(CHILD), NOW - DAY, NOW + DAY, ROOT),
        key_record(pub(GRANDCHILD), NOW - DAY, NOW + DAY, CHILD),
    ]
    assert check(sign_catalog(body(), GRANDCHILD, key_chain=chain)).sequence == 5
    assert check(sign_catalog(body(), CHILD, key_chain=chain)).sequence == 5


def test_a_chained_key_outside_its_own_window_signs_nothing():
    chain = [key_record(pub(CHILD), NOW + 10, NOW + DAY, ROOT)]
    with pytest.raises(CatalogUntrusted) as exc:
        check(sign_catalog(body(), CHILD, key_chain=chain))
    assert reason(exc) == "signer_not_yet_valid"


def test_a_record_before_its_endorser_is_refused():
    chain = [
        key_record(pub(GRANDCHILD), NOW - DAY, NOW + DAY, CHILD),
        key_record(pub(CHILD), NOW - DAY, NOW + DAY, ROOT),
    ]
    with pytest.raises(CatalogUntrusted) as exc:
        check(sign_catalog(body(), GRANDCHILD, key_chain=chain))
    assert (reason(exc), exc.value.detail["index"]) == ("unknown_endorser", 0)


def test_a_record_endorsed_by_another_key_than_it_names_is_refused():
    record = key_record(pub(CHILD), NOW - DAY, NOW + DAY, OTHER)
    record["endorsed_by"] = kid(ROOT)
    with pytest.raises(CatalogUntrusted) as exc:
        check(sign_catalog(body(), CHILD, key_chain=[record]))
    assert reason(exc) == "bad_endorsement"


def test_a_record_changed_after_its_endorsement_is_refused():
    record = key_record(pub(CHILD), NOW - DAY, NOW + DAY, ROOT)
    record["not_after"] = NOW + 100 * DAY
    with pytest.raises(CatalogUntrusted) as exc:
        check(sign_catalog(body(), CHILD, key_chain=[record]))
    assert reason(exc) == "bad_endorsement"


@pytest.mark.parametrize("change", ["key_id", "window", "duplicate"])
def test_a_malformed_record_is_invalid(change):
    record = key_record(pub(CHILD), NOW - DAY, NOW + DAY, ROOT)
    if change == "key_id":
        record["key_id"] = kid(OTHER)
    elif change == "window":
        record = key_record(pub(CHILD), NOW, NOW, ROOT)
    else:
        record = key_record(pub(ROOT), NOW - DAY, NOW + DAY, ROOT)
    with pytest.raises(CatalogInvalid):
        check(sign_catalog(body(), ROOT, key_chain=[record]))


@pytest.mark.parametrize(("sequence", "passes"), [(4, False), (5, True), (6, True)])
def test_the_sequence_may_not_fall_below_the_high_water_mark(sequence, passes):
    document = sign_catalog(body(sequence=sequence), ROOT)
    if passes:
        assert check(document, high_water=5).sequence == sequence
    else:
        with pytest.raises(CatalogRollback) as exc:
            check(document, high_water=5)
        assert exc.value.detail == {"reason": "rollback", "sequence": 4, "high_water": 5}


@pytest.mark.parametrize(("expires_at", "passes"), [(NOW - 1, False), (NOW, False), (NOW + 1, True)])
def test_a_catalog_is_honoured_only_before_it_expires(expires_at, passes):
    document = sign_catalog(body(expires_at=expires_at), ROOT)
    if passes:
        assert check(document).expires_at == expires_at
    else:
        with pytest.raises(CatalogExpired):
            check(document)


def test_signatures_come_before_expiry_and_expiry_before_rollback_and_rollback_before_entries():
    stale = body(sequence=1, expires_at=NOW - 1, revoked_digests=[DIGEST])
    with pytest.raises(CatalogUntrusted):
        check(sign_catalog(stale, OTHER), high_water=5)
    with pytest.raises(CatalogExpired):
        check(sign_catalog(stale, ROOT), high_water=5)
    with pytest.raises(CatalogRollback):
        check(sign_catalog(body(sequence=1, revoked_digests=[DIGEST]), ROOT), high_water=5)


@pytest.mark.parametrize("high_water", [-1, True, "5"])
def test_an_unusable_recorded_high_water_mark_is_refused(high_water):
    with pytest.raises(TrustUnavailable):
        check(sign_catalog(body(), ROOT), high_water=high_water)


def test_unusable_recorded_revocations_are_refused():
    with pytest.raises(TrustUnavailable):
        check(sign_catalog(body(), ROOT), revoked=frozenset({"not-a-key-id"}))


SECOND = "sha256:" + "cd" * 32


@pytest.mark.parametrize(
    ("entries", "rule"),
    [
        ([entry(runtime_id="shell")], "reserved_shell"),
        ([entry(platforms=[])], "platforms"),
        ([entry(platforms=[PLATFORM, PLATFORM])], "platforms"),
        ([entry(platforms=["X86_64-Linux"])], "platforms"),
        ([entry(platforms=["a" * 65])], "platforms"),
        ([entry(core="^0.1.0")], "core_range"),
        ([entry(core="")], "core_range"),
        ([entry(core="*")], "core_range"),
        ([entry(core=">=0.1")], "core_range"),
        ([entry(core=">=0.1.0-rc1")], "core_range"),
        ([entry(core=", ".join([">=0.1.0"] * 20))], "core_range"),
        ([entry(), entry(digest=SECOND)], "duplicate_version"),
        ([entry(), entry(version="1.0.1")], "duplicate_digest"),
        ([entry(), entry(package_id="other.hermes", version="2.0.0", digest=SECOND)], "identity_conflict"),
        ([entry(), entry(runtime_id="codex", version="2.0.0", digest=SECOND)], "identity_conflict"),
        ([entry(digest=SECOND)], "revoked_digest"),
    ],
)
def test_a_catalog_with_a_bad_entry_is_invalid(entries, rule):
    with pytest.raises(CatalogInvalid) as exc:
        check(sign_catalog(body(entries=entries, revoked_digests=[SECOND] if rule == "revoked_digest" else []), ROOT))
    assert exc.value.detail == {"reason": "entry_invalid", "index": len(entries) - 1, "rule": rule}


def verified(**changes: Any) -> VerifiedCatalog:
    return check(sign_catalog(body(**changes), ROOT))


def test_authorize_returns_the_matching_entry():
    catalog = verified()
    found = catalog.authorize("pohunek.runtime.hermes", "hermes", DIGEST, platform=PLATFORM, core_version="0.1.7")
    assert found == catalog.entries[0]


@pytest.mark.parametrize(
    ("claim", "platform", "core", "why"),
    [
        (("pohunek.runtime.other", "hermes", DIGEST), PLATFORM, "0.1.0", "no_entry"),
        (("pohunek.runtime.hermes", "codex", DIGEST), PLATFORM, "0.1.0", "no_entry"),
        (("pohunek.runtime.hermes", "hermes", SECOND), PLATFORM, "0.1.0", "no_entry"),
        (("pohunek.runtime.hermes", "shell", DIGEST), PLATFORM, "0.1.0", "reserved_shell"),
        (("pohunek.runtime.hermes", "hermes", DIGEST), "aarch64-apple-darwin", "0.1.0", "platform"),
        (("pohunek.runtime.hermes", "hermes", DIGEST), PLATFORM, "0.2.0", "core_version"),
        (("pohunek.runtime.hermes", "hermes", DIGEST), PLATFORM, "0.0.9", "core_version"),
        (("pohunek.runtime.hermes", "hermes", DIGEST), PLATFORM, "0.1", "core_version"),
    ],
)
def test_authorize_refuses_any_mismatch(claim, platform, core, why):
    with pytest.raises(NotAuthorized) as exc:
        verified().authorize(*claim, platform=platform, core_version=core)
    assert reason(exc) == why


def test_authorize_refuses_a_revoked_digest():
    catalog = verified(revoked_digests=[SECOND])
    with pytest.raises(NotAuthorized) as exc:
        catalog.authorize("pohunek.runtime.hermes", "hermes", SECOND, platform=PLATFORM, core_version="0.1.0")
    assert reason(exc) == "digest_revoked"


@pytest.mark.parametrize("runtime_id", ["hermes", "codex", "claude", "shell"])
def test_an_explicit_digest_never_authorizes_a_reserved_runtime(runtime_id):
    assert explicit_digest_allows(runtime_id, DIGEST, DIGEST) is False


def test_an_explicit_digest_authorizes_exactly_its_own_archive():
    assert explicit_digest_allows("my-tool", DIGEST, DIGEST) is True
    assert explicit_digest_allows("my-tool", SECOND, DIGEST) is False
    assert explicit_digest_allows("my-tool", DIGEST.upper(), DIGEST.upper()) is False


def test_the_host_platform_is_a_target_triple():
    triple = host_platform()
    assert triple.endswith(("-unknown-linux-gnu", "-unknown-linux-musl", "-apple-darwin"))
    assert triple.split("-")[0] in ("x86_64", "aarch64")


def test_errors_name_positions_never_catalog_content():
    marker = "evil\u0007marker"
    with pytest.raises(CatalogInvalid) as exc:
        check(sign_catalog(body(entries=[entry(), entry(version="9", digest=SECOND, package_id=marker)]), ROOT))
    text = json.dumps(exc.value.to_dict())
    assert "marker" not in text and "catalog.entries[1].package_id" in text
