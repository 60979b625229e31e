"""A service's key follows its secret file: another valid key there is taken once; the same key,
an unchanged file or one that is not a safe key is not (the old key serves on)."""

from __future__ import annotations

import zmq

from shared.transport import curve_keys
from shared.transport.server_key import ServerKey


def served(tmp_path) -> ServerKey:
    curve_keys.init(tmp_path, ["updater"])
    return ServerKey(tmp_path, "updater", curve_keys.server_secret(tmp_path, "updater"))


def test_a_new_key_in_the_file_is_taken_once(tmp_path):
    key = served(tmp_path)
    assert key.replaced() is None  # nothing changed
    public = curve_keys.rotate_server(tmp_path, "updater")
    secret = key.replaced()
    assert secret is not None and curve_keys.public_of(secret) == public and key.secret == secret
    assert key.replaced() is None  # taken already


def test_the_same_key_written_again_is_no_change(tmp_path):
    key = served(tmp_path)
    path = curve_keys.store(tmp_path) / "server" / "updater.key_secret"
    text = path.read_bytes()
    path.unlink()
    path.write_bytes(text)  # another file, the same key
    path.chmod(0o600)
    assert key.replaced() is None


def test_an_unusable_file_keeps_the_old_key(tmp_path):
    key = served(tmp_path)
    old = key.secret
    path = curve_keys.store(tmp_path) / "server" / "updater.key_secret"
    path.write_text("not a key\n")
    assert key.replaced() is None and key.secret == old
    path.write_text(zmq.curve_keypair()[1].decode() + "\n")
    path.chmod(0o644)  # a key others could read is never used
    assert key.replaced() is None and key.secret == old
    path.chmod(0o600)
    assert key.replaced() is not None  # the file changed again, and is safe now


def test_only_a_curve_service_has_a_key_to_follow():
    assert ServerKey.of([]) is None
    assert ServerKey.of([(zmq.CURVE_SECRETKEY, b"x" * 40)]) is None  # no ZAP domain: not a service's
