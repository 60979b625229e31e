"""The endpoints: the portal's public API and the ``/_sim/`` control API, as one route table.

Each endpoint checks its own fields and answers a JSON object (status 200) or raises ApiError.
The server has already parsed the body by the kind the table names for the route.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from simulators.portal_sim import faults
from simulators.portal_sim.config import TIERS
from simulators.portal_sim.errors import ApiError, invalid_request, invalid_token
from simulators.portal_sim.state import State

FORM, JSON, NO_BODY = "form", "json", None
CONTROL_PREFIX = "/_sim/"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: str
    authorization: str | None
    body: Any  # a form dict, a JSON object or None, per the route's body kind


Endpoint = Callable[[State, Request], dict[str, Any]]


# --- field checks --------------------------------------------------------------------------------


def _text(data: dict[str, Any], name: str) -> str:
    value = data.get(name)
    if not isinstance(value, str) or not value:
        raise invalid_request(f"{name} must be a non-empty string")
    try:
        value.encode("utf-8")  # JSON can carry lone surrogates, which no file or digest takes
    except UnicodeEncodeError:
        raise invalid_request(f"{name} is not valid Unicode") from None
    return value


def _optional_text(data: dict[str, Any], name: str) -> str | None:
    return None if data.get(name) is None else _text(data, name)


def _only(data: dict[str, Any], *names: str) -> dict[str, Any]:
    # Control calls come from tests: a misspelt field is an error, not a silent default.
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise invalid_request(f"unknown fields: {', '.join(unknown)}")
    return data


def _query_value(request: Request, name: str) -> str | None:
    values = parse_qs(request.query, keep_blank_values=True).get(name)
    if values is None:
        return None
    if len(values) != 1:
        raise invalid_request(f"{name} given more than once")
    return values[0]


def _bearer(request: Request) -> str:
    scheme, _, token = (request.authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise invalid_token()
    return token.strip()


def _tier(value: str | None) -> str | None:
    if value is not None and value not in TIERS:
        raise invalid_request(f"tier must be one of {', '.join(TIERS)}")
    return value


# --- the portal ----------------------------------------------------------------------------------


def device_code(state: State, request: Request) -> dict[str, Any]:
    form = request.body
    return state.issue_device_code(_text(form, "client_id"), form.get("scope", ""))


def token(state: State, request: Request) -> dict[str, Any]:
    form = request.body
    grant_type = _text(form, "grant_type")
    if grant_type == DEVICE_GRANT:
        return state.poll(_text(form, "device_code"), _text(form, "client_id"))
    if grant_type == "refresh_token":
        return state.refresh(_text(form, "refresh_token"), _text(form, "client_id"))
    raise ApiError(400, "unsupported_grant_type", f"grant_type {grant_type!r} is not supported")


def recommended_default(state: State, request: Request) -> dict[str, Any]:
    if request.authorization is not None:
        tier = state.authenticate(_bearer(request))["tier"]
    else:
        tier = _tier(_query_value(request, "tier")) or "free"  # no token, no tier: a guest
    return {"model": state.recommended(tier), "tier": tier}


def anonymous_register(state: State, request: Request) -> dict[str, Any]:
    return state.register_guest()


def anonymous_me(state: State, request: Request) -> dict[str, Any]:
    return state.guest_view(_bearer(request))


def anonymous_claim(state: State, request: Request) -> dict[str, Any]:
    account_id = state.authenticate(_bearer(request))["sub"]
    return state.claim(account_id, _text(request.body, "token"))


# --- the control API -----------------------------------------------------------------------------


def sim_approve(state: State, request: Request) -> dict[str, Any]:
    body = _only(request.body, "user_code", "email", "tier", "host")
    email = _text(body, "email")
    if "@" not in email:
        raise invalid_request("email must be an email address")
    host = _optional_text(body, "host")
    if host is not None and not host.startswith(("http://", "https://")):
        raise invalid_request("host must be an http(s) URL")
    tier = _tier(_optional_text(body, "tier"))
    return {"account": state.approve(_text(body, "user_code"), email, tier, host)}


def sim_deny(state: State, request: Request) -> dict[str, Any]:
    state.deny(_text(_only(request.body, "user_code"), "user_code"))
    return {"status": "denied"}


def sim_config(state: State, request: Request) -> dict[str, Any]:
    return state.update_config(request.body)


def sim_add_faults(state: State, request: Request) -> dict[str, Any]:
    method, path, count, fault = faults.parse(request.body)
    return {"queued": state.add_faults(method, path, count, fault)}


def sim_clear_faults(state: State, request: Request) -> dict[str, Any]:
    state.clear_faults()
    return {"status": "cleared"}


def sim_requests(state: State, request: Request) -> dict[str, Any]:
    return {"requests": state.requests(_query_value(request, "path"))}


def sim_accounts(state: State, request: Request) -> dict[str, Any]:
    return {"accounts": state.accounts_view()}


def sim_revoke(state: State, request: Request) -> dict[str, Any]:
    return state.revoke_account(_text(_only(request.body, "email"), "email"))


def sim_connect(state: State, request: Request) -> dict[str, Any]:
    body = _only(request.body, "token", "app")
    return state.connect(_text(body, "token"), _text(body, "app"))


def sim_reset(state: State, request: Request) -> dict[str, Any]:
    state.reset()
    return {"status": "reset"}


ROUTES: dict[str, dict[str, tuple[Endpoint, str | None]]] = {
    "/api/oauth/device/code": {"POST": (device_code, FORM)},
    "/api/oauth/token": {"POST": (token, FORM)},
    "/api/model/recommended-default": {"GET": (recommended_default, NO_BODY)},
    "/api/anonymous/register": {"POST": (anonymous_register, NO_BODY)},
    "/api/anonymous/me": {"GET": (anonymous_me, NO_BODY)},
    "/api/anonymous/claim": {"POST": (anonymous_claim, JSON)},
    "/_sim/device/approve": {"POST": (sim_approve, JSON)},
    "/_sim/device/deny": {"POST": (sim_deny, JSON)},
    "/_sim/config": {"POST": (sim_config, JSON)},
    "/_sim/faults": {"POST": (sim_add_faults, JSON), "DELETE": (sim_clear_faults, NO_BODY)},
    "/_sim/requests": {"GET": (sim_requests, NO_BODY)},
    "/_sim/accounts": {"GET": (sim_accounts, NO_BODY)},
    "/_sim/accounts/revoke": {"POST": (sim_revoke, JSON)},
    "/_sim/anonymous/connect": {"POST": (sim_connect, JSON)},
    "/_sim/reset": {"POST": (sim_reset, NO_BODY)},
}
