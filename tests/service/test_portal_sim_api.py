"""The portal simulator's server in this process: guest identities, faults, the request log,
and malformed input it survives."""

from __future__ import annotations

import http.client
import json
import re
import secrets
import socket
import threading
from typing import Any

import httpx
import pytest

from simulators.portal_sim import routes
from simulators.portal_sim.server import PortalServer
from simulators.portal_sim.state import State
from tests.support.portal import PortalSim, SimControlError
from tests.support.portal_api import (
    CLAIM,
    CLIENT,
    DEFAULTS,
    DEVICE_CODE,
    RECOMMENDED,
    TOKEN,
    bearer,
    error,
    new_code,
    poll,
    register,
    sign_in,
)

# --- guest identities ----------------------------------------------------------------------------


def test_anonymous_register_and_me(sim: PortalSim, web: httpx.Client) -> None:
    guest = register(web)
    assert guest["token"].startswith("anon_") and guest["tier"] == "free"
    assert re.fullmatch(r"guest_[0-9a-f]+", guest["id"])
    assert register(web)["id"] != guest["id"]
    me = web.get("/api/anonymous/me", headers=bearer(guest["token"]))
    assert me.json() == {"id": guest["id"], "connectors": [], "retired": False}
    assert sim.connect_app(guest["token"], "github") == ["github"]
    assert sim.connect_app(guest["token"], "github") == ["github"]
    assert web.get("/api/anonymous/me", headers=bearer(guest["token"])).json()["connectors"] == ["github"]
    for headers in ({}, bearer("anon_unknown")):
        answer = web.get("/api/anonymous/me", headers=headers)
        assert (answer.status_code, error(answer)) == (401, "invalid_token")


def test_claim_moves_connectors_and_retires_the_guest(sim: PortalSim, web: httpx.Client) -> None:
    guest = register(web)
    sim.connect_app(guest["token"], "github")
    sim.connect_app(guest["token"], "slack")
    account = sign_in(web, sim, "ada@example.com")["access_token"]

    answer = web.post(CLAIM, json={"token": guest["token"]}, headers=bearer(account))
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"status": "claimed", "connectors": ["github", "slack"], "cohort_carried": True}
    me = web.get("/api/anonymous/me", headers=bearer(guest["token"])).json()
    assert (me["retired"], me["connectors"]) == (True, [])
    [listed] = sim.accounts()
    assert listed["connectors"] == ["github", "slack"]

    answer = web.post(CLAIM, json={"token": guest["token"]}, headers=bearer(account))
    assert (answer.status_code, error(answer)) == (410, "already_retired")
    with pytest.raises(SimControlError, match="409"):
        sim.connect_app(guest["token"], "linear")


def test_claim_errors(sim: PortalSim, web: httpx.Client) -> None:
    account = sign_in(web, sim, "ada@example.com")["access_token"]
    empty = register(web)
    answer = web.post(CLAIM, json={"token": empty["token"]}, headers=bearer(account))
    assert answer.json() == {"status": "claimed", "connectors": [], "cohort_carried": False}

    guest = register(web)
    cases = [
        ({"token": "anon_nobody"}, bearer(account), 410, "unknown_token"),
        ({}, bearer(account), 400, "invalid_request"),
        ({"token": 7}, bearer(account), 400, "invalid_request"),
        ({"token": guest["token"]}, bearer("forged"), 401, "invalid_token"),
        ({"token": guest["token"]}, {}, 401, "invalid_token"),
    ]
    for body, headers, status, code in cases:
        answer = web.post(CLAIM, json=body, headers=headers)
        assert (answer.status_code, error(answer)) == (status, code), body

    sim.fault(CLAIM, status=403, body={"error": "account_locked", "error_description": "locked"})
    answer = web.post(CLAIM, json={"token": guest["token"]}, headers=bearer(account))
    assert (answer.status_code, error(answer)) == (403, "account_locked")
    assert web.post(CLAIM, json={"token": guest["token"]}, headers=bearer(account)).status_code == 200


# --- faults --------------------------------------------------------------------------------------


def test_fault_status_with_retry_after(sim: PortalSim, web: httpx.Client) -> None:
    code = new_code(web)
    assert sim.fault(TOKEN, status=503, headers={"Retry-After": "7"}, count=2) == 2
    for _ in range(2):
        answer = poll(web, code)
        assert (answer.status_code, answer.headers["retry-after"]) == (503, "7")
        assert answer.json() == {"error": "simulated"}
    assert error(poll(web, code)) == "authorization_pending"


def test_fault_matches_method_and_path(sim: PortalSim, web: httpx.Client) -> None:
    sim.fault(RECOMMENDED, method="GET", status=429, body={"error": "rate_limited"})
    assert web.post(DEVICE_CODE, data={"client_id": CLIENT}).status_code == 200
    assert web.post(RECOMMENDED).status_code == 405  # a POST does not take the GET's fault
    answer = web.get(RECOMMENDED)
    assert (answer.status_code, answer.json()) == (429, {"error": "rate_limited"})
    assert web.get(RECOMMENDED).status_code == 200


def test_fault_delay_then_normal_answer(sim: PortalSim, web: httpx.Client) -> None:
    sim.fault(RECOMMENDED, method="GET", delay=2.0)
    with pytest.raises(httpx.ReadTimeout):
        web.get(RECOMMENDED, timeout=0.2)  # the answer is certainly later than this
    sim.fault(RECOMMENDED, method="GET", delay=0.2)
    answer = web.get(RECOMMENDED)
    assert (answer.status_code, answer.json()["model"]) == (200, "Hermes-4-14B")


def test_fault_drops_the_connection(sim: PortalSim, web: httpx.Client) -> None:
    code = new_code(web)
    sim.fault(TOKEN, drop=True)
    sim.fault(TOKEN, drop=True, delay=0.1)
    for _ in range(2):
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            poll(web, code)
    assert error(poll(web, code)) == "authorization_pending"
    assert len(sim.requests(TOKEN)) == 3  # dropped requests are still recorded


def test_faults_can_be_cleared_and_are_validated(sim: PortalSim, web: httpx.Client) -> None:
    sim.fault(DEVICE_CODE, status=500, count=3)
    sim.clear_faults()
    assert web.post(DEVICE_CODE, data={"client_id": CLIENT}).status_code == 200
    bad = [
        {"path": TOKEN, "delay": 31},
        {"path": TOKEN, "status": 503, "count": 0},
        {"path": "/_sim/config", "status": 503},
        {"path": TOKEN, "status": 503, "drop": True},
        {"path": TOKEN},
        {"path": TOKEN, "status": "503"},
        {"path": TOKEN, "status": 503, "headers": {"Content-Length": "0"}},
        {"path": TOKEN, "status": 503, "headers": {"X-Bad": "a\r\nb"}},
        {"path": TOKEN, "status": 503, "headers": {"X-Bad": "caf\u00e9"}},
        {"path": TOKEN, "status": 503, "bogus": 1},
        {"path": TOKEN, "headers": {"Retry-After": "1"}},
    ]
    for spec in bad:
        answer = web.post("/_sim/faults", json=spec)
        assert (answer.status_code, error(answer)) == (400, "invalid_request"), spec
    assert web.post(DEVICE_CODE, data={"client_id": CLIENT}).status_code == 200


# --- request log ---------------------------------------------------------------------------------


def test_request_log(sim: PortalSim, web: httpx.Client) -> None:
    code = new_code(web, scope="inference")
    poll(web, code)
    web.get(RECOMMENDED, headers=bearer("whatever"))
    web.post(CLAIM, json={"token": "anon_x"})
    web.get("/nowhere")
    sim.approve(code["user_code"], "ada@example.com")  # control calls are not recorded

    log = sim.requests()
    assert [(entry["method"], entry["path"]) for entry in log] == [
        ("POST", DEVICE_CODE),
        ("POST", TOKEN),
        ("GET", RECOMMENDED),
        ("POST", CLAIM),
        ("GET", "/nowhere"),
    ]
    assert log[0]["form"] == {"client_id": CLIENT, "scope": "inference"}
    assert log[1]["form"]["device_code"] == code["device_code"]
    assert log[3]["json"] == {"token": "anon_x"}
    assert [entry["authorization"] for entry in log] == [False, False, True, False, False]
    assert all(isinstance(entry["time"], float) for entry in log)
    assert [entry["path"] for entry in sim.requests(TOKEN)] == [TOKEN]
    sim.reset()
    assert sim.requests() == []


# --- robustness ----------------------------------------------------------------------------------


def test_malformed_input_answers_400_and_the_server_keeps_serving(sim: PortalSim, web: httpx.Client) -> None:
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    account = sign_in(web, sim, "ada@example.com")["access_token"]
    cases = [
        (TOKEN, b"grant_type=%ff", form),
        (TOKEN, b"client_id=a&client_id=b&grant_type=refresh_token&refresh_token=x", form),
        (TOKEN, b"no-equals-sign", form),
        (TOKEN, json.dumps({"grant_type": "refresh_token"}).encode(), {"Content-Type": "application/json"}),
        (DEVICE_CODE, b"client_id=hermes-cli", {"Content-Type": "text/plain"}),
        (CLAIM, b"{not json", {**bearer(account), "Content-Type": "application/json"}),
        (CLAIM, b"[1, 2]", bearer(account)),
        (CLAIM, b"\xff\xfe", bearer(account)),
        ("/_sim/config", b'{"interval": NaN}', {}),
        ("/_sim/config", b'{"interval": "fast"}', {}),
        ("/_sim/config", b'{"interval": -1}', {}),
        ("/_sim/config", b'{"interval": true}', {}),
        ("/_sim/config", b'{"recommended": {"gold": "x"}}', {}),
        ("/_sim/config", b'{"clients": "hermes-cli"}', {}),
        ("/_sim/config", b'{"bogus": 1}', {}),
        ("/_sim/device/approve", b'{"user_code": 5, "email": "a@b.c"}', {}),
        ("/_sim/device/approve", b'{"user_code": "BCDF-GHJK", "email": "not-an-email"}', {}),
        ("/_sim/device/approve", b'{"user_code": "BCDF-GHJK", "email": "a@b.c", "tier": "gold"}', {}),
        ("/_sim/device/approve", b'{"user_code": "BCDF-GHJK", "email": "a@b.c\\ud800"}', {}),
        ("/_sim/anonymous/connect", b'{"token": "anon_x"}', {}),
        ("/_sim/faults", b"[" * 100_000, {}),
    ]
    for path, body, headers in cases:
        answer = web.post(path, content=body[: 60 * 1024], headers=headers)
        assert (answer.status_code, error(answer)) == (400, "invalid_request"), (path, body[:40])
    assert web.get(RECOMMENDED, headers=bearer(account)).status_code == 200
    assert sim.configure() == DEFAULTS  # no bad update changed anything


def test_framing_errors(sim: PortalSim, web: httpx.Client) -> None:
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    answer = web.post(TOKEN, content=b"a" * (64 * 1024 + 1), headers=form)
    assert (answer.status_code, error(answer)) == (413, "request_too_large")
    answer = web.get("/api/nothing")
    assert (answer.status_code, error(answer)) == (404, "not_found")
    answer = web.put(TOKEN)
    assert (answer.status_code, error(answer), answer.headers["allow"]) == (405, "method_not_allowed", "POST")

    host, port = web.base_url.host, web.base_url.port
    for raw in (
        b"POST /api/oauth/token HTTP/1.1\r\nHost: x\r\nContent-Length: lots\r\n\r\n",
        b"POST /api/oauth/token HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"\x16\x03\x01 not http at all\r\n\r\n",
        b"POST /api/oauth/token HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\npartial",
    ):
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(raw)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(4096):
                pass  # whatever the answer, the server ends this connection
    assert web.get(RECOMMENDED).status_code == 200


def test_keep_alive_survives_error_answers(sim: PortalSim) -> None:
    host, port = httpx.URL(sim.url).host, httpx.URL(sim.url).port
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", f"{RECOMMENDED}?tier=plus")
        first = conn.getresponse()
        assert (first.status, json.loads(first.read())["model"]) == (200, "Hermes-4-70B")
        sock = conn.sock
        for method, path, status in (
            ("GET", "/missing", 404),
            ("HEAD", RECOMMENDED, 405),
            ("POST", DEVICE_CODE, 400),
            ("GET", RECOMMENDED, 200),
        ):
            conn.request(method, path)
            answer = conn.getresponse()
            body = answer.read()
            assert answer.status == status and (body == b"") == (method == "HEAD")
            assert conn.sock is sock  # the same connection all along
    finally:
        conn.close()


def test_a_handler_bug_answers_500_and_the_server_keeps_serving(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = f"anon_{secrets.token_hex(8)}"

    def broken(state: State, request: routes.Request) -> dict[str, Any]:
        raise KeyError(secret)

    monkeypatch.setitem(routes.ROUTES, "/api/anonymous/register", {"POST": (broken, routes.NO_BODY)})
    server = PortalServer("127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with httpx.Client(base_url=server.base, timeout=10) as client:
            answer = client.post("/api/anonymous/register")
            assert (answer.status_code, error(answer)) == (500, "server_error")
            assert client.get(RECOMMENDED).status_code == 200
    finally:
        server.shutdown()
        server.server_close()
    logged = capsys.readouterr().err
    assert "KeyError" in logged and secret not in logged
