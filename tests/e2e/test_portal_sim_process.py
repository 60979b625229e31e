"""The portal simulator as a real process: state across a restart, TLS with a test CA, its
command line, and SIGTERM and SIGINT."""

from __future__ import annotations

import contextlib
import signal
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trustme

from tests.support.portal import PortalSim, issue_tls
from tests.support.portal_api import RECOMMENDED, bearer, claims, refresh, register, sign_in
from tests.support.processes import ROOT, python_env

# --- the process ---------------------------------------------------------------------------------


def test_state_survives_a_restart(tmp_path: Path) -> None:
    with PortalSim(tmp_path) as sim:
        sim.configure(interval=0)
        with httpx.Client(base_url=sim.url, timeout=10) as web:
            grant = sign_in(web, sim, "ada@example.com", tier="pro")
            reused = sign_in(web, sim, "ada@example.com", tier="pro")
            refresh(web, reused["refresh_token"])
            refresh(web, reused["refresh_token"])  # revokes that family
            guest = register(web)
            sim.connect_app(guest["token"], "github")
        before = sim.accounts()

        sim.restart()
        with httpx.Client(base_url=sim.url, timeout=10) as web:
            answer = web.get(RECOMMENDED, headers=bearer(grant["access_token"]))
            assert answer.json() == {"model": "Hermes-4-405B", "tier": "pro"}
            assert web.get(RECOMMENDED, headers=bearer(reused["access_token"])).status_code == 401
            assert refresh(web, grant["refresh_token"]).status_code == 200
            me = web.get("/api/anonymous/me", headers=bearer(guest["token"])).json()
            assert me == {"id": guest["id"], "connectors": ["github"], "retired": False}
        after = sim.accounts()
        assert [(a["id"], a["email"], a["tier"], a["families"]) for a in after] == [
            (a["id"], a["email"], a["tier"], a["families"]) for a in before
        ]

    assert sim.state_file.stat().st_mode & 0o777 == 0o600
    text = sim.state_file.read_text()
    assert grant["refresh_token"] not in text and guest["token"] not in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["portal_sim.log", "portal_state.json"]  # no temp left


def test_tls_with_a_test_ca(tmp_path: Path) -> None:
    cert, key, trusted = issue_tls(trustme.CA(), tmp_path)

    with PortalSim(tmp_path / "sim", tls=(cert, key), verify=trusted) as sim:
        assert sim.url.startswith("https://127.0.0.1:")
        sim.configure(interval=0)
        with httpx.Client(base_url=sim.url, verify=trusted, timeout=10) as web:
            grant = sign_in(web, sim, "ada@example.com", tier="plus")
            assert claims(grant["access_token"])["host"] == f"{sim.url}/v1"

            with pytest.raises(httpx.ConnectError):  # a client that does not trust the test CA
                httpx.get(f"{sim.url}{RECOMMENDED}", verify=ssl.create_default_context(), timeout=10)
            url = httpx.URL(sim.url)
            with socket.create_connection((url.host, url.port), timeout=10) as sock:
                # Plain HTTP on the TLS port. The server may drop the connection as soon as the
                # bytes arrive, before this end has said it is done (ENOTCONN, a reset): what is
                # tested is that it serves on afterwards.
                with contextlib.suppress(OSError):
                    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                    sock.shutdown(socket.SHUT_WR)
                    while sock.recv(4096):
                        pass
            answer = web.get(RECOMMENDED, headers=bearer(grant["access_token"]))
            assert answer.json() == {"model": "Hermes-4-70B", "tier": "plus"}


def _run_sim(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "simulators.portal_sim", *argv],
        cwd=ROOT,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_command_line(tmp_path: Path) -> None:
    for argv in (["--port", "http"], ["--port", "70000"], ["--bogus"], ["--tls-cert", "cert.pem"]):
        done = _run_sim(*argv)
        assert (done.returncode, done.stdout) == (2, ""), argv
        assert "usage:" in done.stderr
    corrupt = tmp_path / "state.json"
    corrupt.write_text("{")
    done = _run_sim("--state", str(corrupt))
    assert (done.returncode, done.stdout) == (1, "") and "corrupt" in done.stderr


def test_sigterm_and_sigint_exit_cleanly(tmp_path: Path) -> None:
    sim = PortalSim(tmp_path / "term", state=False)
    assert sim.stop() == 0
    sim = PortalSim(tmp_path / "int")
    try:
        assert sim.proc is not None
        sim.proc.send_signal(signal.SIGINT)
        assert sim.proc.wait(timeout=10) == 0
    finally:
        sim.stop()
