"""IPC endpoints against the kernel: a fallback endpoint really binds, and the path limit is
the real one."""

from __future__ import annotations

import os
import stat

import pytest
import zmq

from shared.homes import (
    IPC_PATH_MAX,
    endpoint,
)
from tests.support.homes import deep_home

# --- endpoints ------------------------------------------------------------------------------


def _bind_and_close(address: str) -> None:
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.bind(address)
    finally:
        sock.close()


def test_real_bind_on_fallback_endpoint(tmp_path, fallback_dirs):
    home = deep_home(tmp_path)
    ep = endpoint(home, "gateway", env={})
    fallback_dirs.append(ep.directory)
    # The home's own run/ is too deep for a socket path: the endpoint is elsewhere, and fits.
    assert not ep.directory.is_relative_to(home)
    for address in (ep.control, ep.events):
        path = address.removeprefix("ipc://")
        assert len(os.fsencode(path)) <= IPC_PATH_MAX
        sock = zmq.Context.instance().socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.bind(address)
            assert stat.S_ISSOCK(os.stat(path).st_mode), f"binding {address} made no socket"
        finally:
            sock.close()


def test_ipc_path_max_is_the_real_kernel_limit(tmp_path):
    directory = tmp_path / "s"
    directory.mkdir()
    prefix = len(os.fsencode(directory)) + 1
    fits = directory / ("a" * (IPC_PATH_MAX - prefix))
    too_long = directory / ("b" * (IPC_PATH_MAX + 1 - prefix))
    assert len(os.fsencode(fits)) == IPC_PATH_MAX
    _bind_and_close(f"ipc://{fits}")
    with pytest.raises(zmq.ZMQError):
        _bind_and_close(f"ipc://{too_long}")
