"""Every way the portal can fail, against real local HTTP servers: each is its typed error, and
no message names a class of the HTTP client or quotes the server's error code (the code stays
in the error's detail, for scripts)."""

from __future__ import annotations

import re
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import trustme

from nous import portal
from nous.portal_errors import (
    PortalBusy,
    PortalError,
    PortalInvalidAnswer,
    PortalRefused,
    PortalTLSError,
    PortalUnreachable,
)
from tests.support.portal import PortalSim, issue_tls

SERVER_CODE = "zz_private_server_code"
# A class name: a CamelCase word, or any word ending like one (ConnectError, ReadTimeout, SSLError).
CLASS_NAME = re.compile(r"\b(?:[A-Z][a-z]+[A-Z]\w*|\w*(?:Error|Exception|Timeout))\b")


def assert_plain(error: PortalError) -> None:
    for text in (str(error), error.message, error.to_dict()["message"]):
        assert not CLASS_NAME.search(text), text
        assert SERVER_CODE not in text and "simulated" not in text, text


def register(url: str, tls: ssl.SSLContext | None = None, timeout: float = 5.0) -> PortalError:
    with pytest.raises(PortalError) as caught:
        portal.register_guest_blocking(url, tls or ssl.create_default_context(), timeout=timeout)
    assert_plain(caught.value)
    return caught.value


async def device_code(url: str, tls: ssl.SSLContext | None = None) -> PortalError:
    with pytest.raises(PortalError) as caught:
        async with portal.Portal(url, tls or ssl.create_default_context(), timeout=5.0) as api:
            await api.device_code()
    assert_plain(caught.value)
    return caught.value


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_a_refused_connection_is_unreachable_in_words(closed_port):
    url = f"http://127.0.0.1:{closed_port}"
    for error in (register(url), await device_code(url)):
        assert isinstance(error, PortalUnreachable)
        assert "refused the connection" in error.message and url in error.message


async def test_a_dropped_connection_and_a_slow_answer_are_unreachable_in_words(sim):
    sim.fault("/api/anonymous/register", drop=True)
    assert "dropped the connection" in register(sim.url).message
    sim.fault("/api/anonymous/register", delay=3.0)
    slow = register(sim.url, timeout=0.5)
    assert isinstance(slow, PortalUnreachable) and "did not answer in time" in slow.message


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_a_busy_portal_says_so_with_its_status(sim, status):
    for _ in range(2):
        sim.fault("/api/anonymous/register", status=status, headers={"Retry-After": "7"}, body={"error": SERVER_CODE})
    sim.fault("/api/oauth/device/code", status=status, body={"error": SERVER_CODE})
    busy = register(sim.url)
    assert isinstance(busy, PortalBusy) and (busy.status, busy.retry_after) == (status, 7.0)
    assert isinstance(await device_code(sim.url), PortalBusy)


async def test_a_refusal_keeps_the_servers_code_out_of_its_message(sim):
    sim.fault("/api/anonymous/register", status=403, body={"error": SERVER_CODE})
    sim.fault("/api/oauth/device/code", status=400, body={"error": SERVER_CODE})
    for error in (register(sim.url), await device_code(sim.url)):
        assert isinstance(error, PortalRefused) and error.error == SERVER_CODE
        assert error.to_dict()["detail"]["error"] == SERVER_CODE  # for scripts, in its own field


async def test_answers_that_cannot_be_used_are_invalid_in_words(sim, not_json_server):
    for error in (register(not_json_server), await device_code(not_json_server)):
        assert isinstance(error, PortalInvalidAnswer) and "is not JSON" in error.message
    sim.fault("/api/anonymous/register", status=200, body=["a", "list"])
    assert isinstance(register(sim.url), PortalInvalidAnswer)
    sim.fault("/api/anonymous/register", status=400, body={"detail": SERVER_CODE})
    assert isinstance(register(sim.url), PortalInvalidAnswer)


async def test_a_certificate_that_does_not_verify_and_a_bundle_that_is_not_one(tmp_path):
    cert, key, _ = issue_tls(trustme.CA(), tmp_path)
    with PortalSim(tmp_path / "tls", tls=(cert, key), verify=False, in_process=True) as tls_sim:
        for error in (register(tls_sim.url), await device_code(tls_sim.url)):
            assert isinstance(error, PortalTLSError) and "certificate could not be verified" in error.message
    garbage = tmp_path / "bundle.pem"
    garbage.write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
    with pytest.raises(PortalTLSError) as caught:
        portal.tls_context(str(garbage))
    assert_plain(caught.value)
    assert str(garbage) in caught.value.message


class _NotJson(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = b"<html>a proxy's error page</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's signature)
        pass


@pytest.fixture
def not_json_server() -> Iterator[str]:
    """A real HTTP server that answers every POST with an HTML page: its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotJson)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)
