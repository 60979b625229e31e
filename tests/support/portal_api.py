"""The portal's HTTP API as a client speaks it: the device flow, refresh, bearer calls and
guest identities, for tests that talk to the simulator directly."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx

from tests.support.portal import PortalSim

CLIENT = "hermes-cli"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
DEVICE_CODE = "/api/oauth/device/code"
TOKEN = "/api/oauth/token"
RECOMMENDED = "/api/model/recommended-default"
CLAIM = "/api/anonymous/claim"
DEFAULTS = {
    "interval": 0,
    "slow_down_step": 5,
    "device_ttl": 900,
    "access_ttl": 3600,
    "recommended": {"free": "Hermes-4-14B", "plus": "Hermes-4-70B", "pro": "Hermes-4-405B"},
    "clients": [CLIENT],
}


def error(answer: httpx.Response) -> str:
    assert answer.headers["content-type"] == "application/json"
    body = answer.json()
    assert isinstance(body.get("error_description"), str)
    return body["error"]


def new_code(web: httpx.Client, **form: str) -> dict[str, Any]:
    answer = web.post(DEVICE_CODE, data={"client_id": CLIENT, **form})
    assert answer.status_code == 200, answer.text
    return answer.json()


def poll(web: httpx.Client, code: dict[str, Any], client_id: str = CLIENT) -> httpx.Response:
    form = {"grant_type": DEVICE_GRANT, "device_code": code["device_code"], "client_id": client_id}
    return web.post(TOKEN, data=form)


def refresh(web: httpx.Client, refresh_token: str, client_id: str = CLIENT) -> httpx.Response:
    return web.post(TOKEN, data={"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": client_id})


def sign_in(web: httpx.Client, sim: PortalSim, email: str, tier: str = "free", **approve: str) -> dict[str, Any]:
    """The whole device flow: a code, its approval, the token answer."""
    code = new_code(web)
    sim.approve(code["user_code"], email, tier=tier, **approve)
    answer = poll(web, code)
    assert answer.status_code == 200, answer.text
    return answer.json()


def claims(access_token: str) -> dict[str, Any]:
    payload = access_token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def register(web: httpx.Client) -> dict[str, Any]:
    answer = web.post("/api/anonymous/register")
    assert answer.status_code == 200, answer.text
    return answer.json()
