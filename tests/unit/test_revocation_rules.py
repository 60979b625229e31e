"""Revocation on live CURVE connections: the ZAP User-Id that names a key, the judgement of
each request against the keys authorized now, and the cached set and its refresh rule."""

from __future__ import annotations

import os
import time

import pytest
import zmq
from zmq.utils import z85

from shared.protocol import Code
from shared.transport import authorized, curve_keys, zap
from shared.transport.authorized import REFRESH, SETTLE, AuthorizedKeys, judge, user_id
from shared.transport.call_rules import HANDSHAKE_REFUSALS, RETRYABLE


def _key() -> bytes:
    return zmq.curve_keypair()[0]


def test_zaps_user_id_names_the_key_itself_and_its_name(tmp_path):
    curve_keys.init(tmp_path, [])
    local = curve_keys.public_keys(tmp_path, "authorized")["local"]
    request = [b"1.0", b"7", b"d", b"127.0.0.1", b"", b"CURVE", z85.decode(local)]
    user = zap.answer(request, {"d": tmp_path})[4]
    assert user == user_id("local", local) == local + b" local"
    assert authorized.name_of(user.decode()) == "local"
    assert judge(user.decode(), frozenset({local.decode()})) is None


def test_a_request_is_served_only_while_its_key_is_authorized_whatever_the_name():
    mine, other = _key(), _key()
    user = user_id("laptop", mine).decode()
    assert judge(user, frozenset({mine.decode(), other.decode()})) is None
    assert judge(user_id("renamed", mine).decode(), frozenset({mine.decode()})) is None  # the key decides
    refused = judge(user, frozenset({other.decode()}))  # "laptop" authorized again with another key
    assert refused is not None and refused.code == Code.AUTH_REVOKED
    assert mine.decode() not in refused.message and "laptop" not in refused.message
    for junk in ("", "laptop", mine.decode(), mine.decode() + "xlaptop", "k" * 10 + " laptop"):
        verdict = judge(junk, frozenset({mine.decode(), "laptop"}))
        assert verdict is not None and verdict.code == Code.AUTH_REVOKED


def test_a_revoked_key_is_a_refusal_never_retried():
    assert Code.AUTH_REVOKED in HANDSHAKE_REFUSALS and Code.AUTH_REVOKED not in RETRYABLE


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def install(tmp_path, monkeypatch):
    """An install with two authorized keys; ``reads`` counts the reads of ``authorized/``."""
    curve_keys.init(tmp_path, [])
    first, second = _key(), _key()
    curve_keys.add_public(tmp_path, "authorized", "first", first)
    curve_keys.add_public(tmp_path, "authorized", "second", second)
    reads = []
    real = curve_keys.public_keys

    def counted(root, sub):
        reads.append(sub)
        return real(root, sub)

    monkeypatch.setattr(curve_keys, "public_keys", counted)
    return tmp_path, first.decode(), second.decode(), reads


def _age(directory, seconds: float) -> int:
    """Set ``directory``'s mtime ``seconds`` in the past; returns it."""
    mtime = time.time_ns() - int(seconds * 1e9)
    os.utime(directory, ns=(mtime, mtime))
    return mtime


def test_the_set_is_read_once_then_looked_at_by_a_stat_at_most_every_refresh(install):
    root, first, second, reads = install
    directory = curve_keys.store(root) / "authorized"
    _age(directory, SETTLE + 10)
    clock = _Clock()
    keys = AuthorizedKeys(root, clock=clock)
    assert keys.current() >= {first, second}
    for _ in range(1000):  # many requests, one read
        keys.current()
    assert len(reads) == 1
    curve_keys.remove_public(root, "authorized", "first")
    assert first in keys.current()  # not looked at again within REFRESH
    clock.now += REFRESH
    assert first not in keys.current() and second in keys.current()
    assert len(reads) == 2
    _age(directory, SETTLE + 10)
    clock.now += REFRESH
    keys.current()
    assert len(reads) == 3  # the directory moved (its mtime was set): read once more
    for _ in range(5):  # nothing changed since a settled read: stats only
        clock.now += REFRESH
        keys.current()
    assert len(reads) == 3


def test_a_fresh_look_sees_a_key_authorized_since_the_last_one_at_once(install):
    """A key let in by ZAP (which reads the directory per handshake) after the set was read
    must not be refused for the set's age: a miss looks again before it refuses."""
    root, first, second, reads = install
    _age(curve_keys.store(root) / "authorized", SETTLE + 10)
    clock = _Clock()
    keys = AuthorizedKeys(root, clock=clock)
    keys.current()
    newcomer = _key()
    curve_keys.add_public(root, "authorized", "newcomer", newcomer)
    assert newcomer.decode() not in keys.current()  # within REFRESH: not looked at
    assert newcomer.decode() in keys.current(fresh=True)
    reads.clear()
    _age(curve_keys.store(root) / "authorized", SETTLE + 10)
    keys.current(fresh=True)
    assert len(reads) == 1
    keys.current(fresh=True)  # nothing changed since a settled read: a stat, no read
    assert len(reads) == 1


def test_a_read_under_a_young_mtime_is_not_trusted(install):
    """Two changes within one clock tick leave the directory's mtime as it was: a read made
    while the mtime was young is made again at the next look, until the mtime settles."""
    root, first, second, reads = install
    directory = curve_keys.store(root) / "authorized"
    clock = _Clock()
    mtime = _age(directory, 0)
    keys = AuthorizedKeys(root, clock=clock, wall=lambda: mtime + int(SETTLE * 1e9) - 1)
    assert first in keys.current()
    curve_keys.remove_public(root, "authorized", "first")
    os.utime(directory, ns=(mtime, mtime))  # the second change of the same tick
    clock.now += REFRESH
    assert first not in keys.current()  # seen all the same

    settled = AuthorizedKeys(root, clock=clock, wall=lambda: mtime + int(SETTLE * 1e9))
    assert second in settled.current()
    curve_keys.remove_public(root, "authorized", "second")
    os.utime(directory, ns=(mtime, mtime))  # a change no stat can see, once the mtime has settled
    clock.now += REFRESH
    assert second in settled.current()  # the cache is trusted: no file is read


def test_a_missing_or_unsafe_directory_refuses_every_key(install):
    root, first, second, reads = install
    directory = curve_keys.store(root) / "authorized"
    _age(directory, SETTLE + 10)
    clock = _Clock()
    keys = AuthorizedKeys(root, clock=clock)
    assert {first, second} <= keys.current()
    directory.chmod(0o755)  # its mtime stays: the mode is in the stat
    clock.now += REFRESH
    assert keys.current() == frozenset()
    directory.chmod(0o700)
    clock.now += REFRESH
    assert {first, second} <= keys.current()
    for name in ("first", "second", "local"):
        curve_keys.remove_public(root, "authorized", name)
    directory.rmdir()
    clock.now += REFRESH
    assert keys.current() == frozenset()
