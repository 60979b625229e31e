"""Services on loopback TCP whose homes this install cannot see, as containers on this host
are (each on its own volume, its port published on 127.0.0.1): the host's CLI, on a root home
of its own, lists and drains such a gateway, and never starts a second copy of such a worker.

Two real homes stand for the two sides: A runs the services, B is the host's CLI; they share
the TCP settings and have exchanged keys with ``mesh keys show --client`` and ``authorize
--server --from``, as docs/tcp-and-curve.md says."""

from __future__ import annotations

import subprocess
import sys

import pytest

from services.handoff_retry import ops as handoff_ops
from shared import homes
from shared.mesh_tcp import TCP_ENV
from shared.protocol import HELLO, Code, RemoteError
from shared.spawn import ServiceNotLocal, ensure_service, stop_service
from shared.transport.sync_client import connect
from tests.support.cli import hermes, hermes_json
from tests.support.processes import ROOT, GatewayProcess, python_env, wait_for
from tests.support.tcp import free_port_pair


@pytest.fixture
def two_homes(short_dir):
    """(home A, home B, the TCP settings both use) with keys made in each and exchanged."""
    home_a, home_b = short_dir / "a", short_dir / "b"
    tcp = {TCP_ENV: f"gateway=tcp://127.0.0.1:{free_port_pair()},handoff_retry=tcp://127.0.0.1:{free_port_pair()}"}
    for home in (home_a, home_b):
        assert hermes("mesh", "keys", "init", home=home).returncode == 0
    client_b = hermes("mesh", "keys", "show", "--client", home=home_b).stdout.strip()
    granted = hermes("mesh", "keys", "authorize", "host-b", client_b, "--grant", "gateway.drain", home=home_a)
    assert granted.returncode == 0
    return home_a, home_b, tcp


def _trust_a_from_b(home_a, home_b) -> None:
    document = hermes("mesh", "keys", "show", "--json", home=home_a).stdout
    done = subprocess.run(
        [sys.executable, "-m", "hermes_cli.main", "mesh", "keys", "authorize", "--server", "--from", "-"],
        input=document,
        cwd=ROOT,
        env=python_env(HERMES_HOME=str(home_b)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_a_gateway_whose_home_is_out_of_sight_is_listed_and_drained(two_homes):
    home_a, home_b, tcp = two_homes
    _trust_a_from_b(home_a, home_b)
    gateway = GatewayProcess(home_a, "default", env=python_env(**tcp))
    try:
        gateway.wait_running()
        assert not (home_b / "run" / "gateway.lock").exists()  # nothing of it is in B's home
        code, status = hermes_json("gateway", "status", home=home_b, env_extra=tcp)
        assert code == 0, status
        assert [(g["pid"], g["source"], g["profile"]) for g in status["gateways"]] == [
            (gateway.pid, "socket", "default")
        ]
        code, drained = hermes_json("gateway", "drain", "--deadline", "2", home=home_b, env_extra=tcp, timeout=60)
        assert code == 0, drained
        assert drained["exits"] is True and drained["pid"] is None  # no lock here names its holder
        assert gateway.wait_exit() == 75
        # Stopped and out of sight: over TCP nobody refuses the connection, so it is asked
        # briefly and reported as not running instead of waited for until the drain's deadline.
        code, again = hermes_json("gateway", "drain", "--deadline", "30", home=home_b, env_extra=tcp, timeout=20)
        assert (code, again["error"]["code"]) == (2, "gateway_not_running"), again
    finally:
        gateway.kill()


def _start_worker(home):
    worker = subprocess.Popen(
        [sys.executable, "-m", "services.handoff_retry"],
        cwd=ROOT,
        env=python_env(HERMES_HOME=str(home)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    endpoint = homes.endpoint(home, handoff_ops.SERVICE, create=False)
    wait_for(lambda: worker.poll() is not None or endpoint.lock_path.exists(), timeout=20, what="the worker's lock")
    assert worker.poll() is None, worker.stderr.read().decode() if worker.stderr else ""
    return worker


def test_a_worker_served_from_another_home_is_used_not_started_again(two_homes, monkeypatch):
    home_a, home_b, tcp = two_homes
    monkeypatch.setenv(TCP_ENV, tcp[TCP_ENV])  # for the worker's process and this one's ensure_service
    worker = _start_worker(home_a)
    try:
        # B still trusts its own handoff_retry key: the handshake is refused, and nothing starts.
        with pytest.raises(RemoteError) as caught:
            ensure_service(home_b, handoff_ops.SERVICE, "services.handoff_retry")
        assert caught.value.code == Code.SERVER_KEY_MISMATCH
        _trust_a_from_b(home_a, home_b)
        endpoint = ensure_service(home_b, handoff_ops.SERVICE, "services.handoff_retry")
        with connect(endpoint) as client:
            assert client.call(HELLO, timeout=10)["pid"] == worker.pid
        assert not (home_b / "logs" / "handoff_retry.log").exists()  # nothing was started for B
        assert not endpoint.lock_path.exists()
        assert worker.poll() is None
    finally:
        worker.kill()
        worker.wait(timeout=10)


def test_a_worker_on_another_host_that_does_not_answer_is_not_started_here(two_homes, monkeypatch):
    _, home_b, _ = two_homes
    monkeypatch.setenv(TCP_ENV, "handoff_retry=tcp://192.0.2.1:7440")  # TEST-NET-1: nobody answers
    for claim in (False, True):  # not even by the mesh's own start: the address is not this host's
        with pytest.raises(ServiceNotLocal) as caught:
            ensure_service(home_b, handoff_ops.SERVICE, "services.handoff_retry", claim=claim)
        assert (caught.value.detail["service"], caught.value.detail["control"]) == (
            "handoff_retry",
            "tcp://192.0.2.1:7440",
        )
    assert not (home_b / "logs" / "handoff_retry.log").exists()


def test_a_worker_on_a_local_address_whose_lock_is_not_here_is_started_only_by_a_claim(two_homes, monkeypatch):
    _, home_b, tcp = two_homes
    monkeypatch.setenv(TCP_ENV, tcp[TCP_ENV])
    monkeypatch.setenv("HERMES_HOME", str(home_b))  # a started worker serves the caller's install
    with pytest.raises(ServiceNotLocal) as caught:  # a container's, say, stopped
        ensure_service(home_b, handoff_ops.SERVICE, "services.handoff_retry")
    assert "docker compose up" in caught.value.detail["hint"]
    assert not (home_b / "logs" / "handoff_retry.log").exists()
    try:  # hermes mesh up runs this home's mesh here: its first start makes the address this home's
        endpoint = ensure_service(home_b, handoff_ops.SERVICE, "services.handoff_retry", claim=True)
        with connect(endpoint) as client:
            started = client.call(HELLO, timeout=10)["pid"]
        assert stop_service(home_b, handoff_ops.SERVICE) == started
        endpoint = ensure_service(home_b, handoff_ops.SERVICE, "services.handoff_retry")  # its lock is here now
        with connect(endpoint) as client:
            assert client.call(HELLO, timeout=10)["pid"] != started
    finally:
        stop_service(home_b, handoff_ops.SERVICE)
