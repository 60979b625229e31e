"""Ed25519 for the runtime catalog: key ids, strict key and signature checks, sign and verify.

``cryptography`` (OpenSSL) verifies Ed25519 without refusing small-order points: with the
identity as public key, the signature ``(R=identity, S=0)`` verifies for every message. So a
public key, and a signature's ``R``, is refused here when it spells a small-order point or is
a non-canonical encoding; with OpenSSL's own refusal of a non-canonical ``S`` this is close to
ed25519-dalek's ``verify_strict``, which Pohunek uses. (P): bytes in, booleans out.
"""

from __future__ import annotations

import hashlib

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

PUBLIC_KEY_BYTES = 32
SEED_BYTES = 32
SIGNATURE_BYTES = 64

# The eight points of order dividing 8, in their canonical encodings (as libsodium lists them).
# A key among them lets one signature verify for many messages, so no key or R may be one.
SMALL_ORDER_ENCODINGS = frozenset(
    bytes.fromhex(text)
    for text in (
        "0100000000000000000000000000000000000000000000000000000000000000",  # order 1 (identity)
        "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",  # order 2
        "0000000000000000000000000000000000000000000000000000000000000000",  # order 4
        "0000000000000000000000000000000000000000000000000000000000000080",  # order 4
        "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",  # order 8
        "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",  # order 8
        "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",  # order 8
        "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",  # order 8
    )
)
_P = 2**255 - 19
_Y_MASK = (1 << 255) - 1

PrivateKeyLike = Ed25519PrivateKey | bytes


def key_id(public_key: bytes) -> str:
    """The id of a public key: lowercase hex sha256 of its 32 raw bytes."""
    return hashlib.sha256(public_key).hexdigest()


def is_usable_point(encoding: bytes) -> bool:
    """Whether ``encoding`` may serve as a public key or a signature's R: 32 bytes, canonical,
    not small-order."""
    if len(encoding) != PUBLIC_KEY_BYTES or encoding in SMALL_ORDER_ENCODINGS:
        return False
    # Canonical: y below the field prime, and no sign bit on x = 0 (y = ±1). The other
    # spellings of the small-order points are all non-canonical, so this refuses them too.
    y = int.from_bytes(encoding, "little") & _Y_MASK
    negative_zero = encoding[31] >> 7 == 1 and y in (1, _P - 1)
    return y < _P and not negative_zero


def verify(public_key: bytes, signature: bytes, message: bytes) -> bool:
    """Whether ``signature`` is ``public_key``'s over ``message``, under the strict rules above."""
    if not is_usable_point(public_key) or len(signature) != SIGNATURE_BYTES:
        return False
    if not is_usable_point(signature[:PUBLIC_KEY_BYTES]):
        return False
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except (InvalidSignature, ValueError, TypeError, UnsupportedAlgorithm):
        return False
    return True


def private_key(key: PrivateKeyLike) -> Ed25519PrivateKey:
    """A private key from a ``cryptography`` key object or its raw 32-byte seed."""
    if isinstance(key, Ed25519PrivateKey):
        return key
    if not isinstance(key, bytes) or len(key) != SEED_BYTES:
        raise ValueError(f"an Ed25519 seed is {SEED_BYTES} raw bytes")
    return Ed25519PrivateKey.from_private_bytes(key)


def public_bytes(key: PrivateKeyLike) -> bytes:
    """The raw 32-byte public key of ``key``."""
    return private_key(key).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def sign(key: PrivateKeyLike, message: bytes) -> bytes:
    return private_key(key).sign(message)
