"""What an endpoint lock seen from here says: held or not for an ipc service and for a local
TCP one that ran here; nothing (None) for another host's, for a local TCP one whose home is
out of sight (a container's), or for a lock that cannot be probed."""

from __future__ import annotations

import os

import pytest

from shared import homes
from shared.endpoint_lock import lock_says
from shared.locks import FileLock
from shared.mesh_tcp import TCP_ENV


@pytest.fixture
def root(short_dir):
    return short_dir


def _ipc(root):
    return homes.endpoint(root, "auth_worker", env={})


def _tcp(root, host: str):
    return homes.endpoint(root, "auth_worker", env={TCP_ENV: f"auth_worker=tcp://{host}:7430"})


def test_an_ipc_lock_says_held_or_not(root):
    endpoint = _ipc(root)
    assert endpoint.tcp is None
    assert lock_says(endpoint) is False  # no file: never ran
    with FileLock(endpoint.lock_path):
        assert lock_says(endpoint) is True
    assert lock_says(endpoint) is False  # the file stays; nobody holds it


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0", "localhost"])
def test_a_local_tcp_lock_file_here_says_held_or_not(root, host):
    endpoint = _tcp(root, host)
    assert endpoint.tcp is not None and endpoint.tcp.is_local
    with FileLock(endpoint.lock_path):
        assert lock_says(endpoint) is True
    assert lock_says(endpoint) is False  # it ran here once and stopped


def test_a_local_tcp_address_without_a_lock_file_here_cannot_tell(root):
    endpoint = _tcp(root, "127.0.0.1")
    assert not endpoint.lock_path.exists()
    assert lock_says(endpoint) is None  # served from a container: its port published on loopback


def test_another_hosts_address_cannot_tell_even_with_a_lock_file_here(root):
    endpoint = _tcp(root, "10.0.0.2")
    assert lock_says(endpoint) is None
    with FileLock(endpoint.lock_path):
        assert lock_says(endpoint) is None


def test_the_environment_names_the_address(root, monkeypatch):
    monkeypatch.setenv(TCP_ENV, "auth_worker=tcp://127.0.0.1:7430")
    endpoint = homes.endpoint(root, "auth_worker")
    assert endpoint.tcp is not None and lock_says(endpoint) is None


@pytest.mark.parametrize("tcp", [False, True])
def test_a_lock_that_cannot_be_probed_cannot_tell(root, tcp):
    endpoint = _tcp(root, "127.0.0.1") if tcp else _ipc(root)
    os.symlink(root / "elsewhere", endpoint.lock_path)
    assert lock_says(endpoint) is None
