"""The sign-in's states, claims and config settling: pure rules, no sockets."""

from __future__ import annotations

import base64
import json
import re

import pytest

from nous.access_token import Claims, InvalidAccessToken, read_claims
from nous.portal_errors import PortalUnreachable
from services.auth_worker import settle
from services.auth_worker.states import (
    RETRY_BUSY,
    TERMINAL_STATES,
    AlreadySignedIn,
    Cancelled,
    Code,
    Completed,
    Failed,
    Reason,
    Retrying,
    TimedOut,
    Waiting,
    WorkerLost,
    worker_lost,
)
from shared import config

RETRY_REASONS = [
    *(v for n, v in vars(PortalUnreachable).items() if n.isupper() and isinstance(v, str)),
    RETRY_BUSY,
]
ACCOUNT = {"signed_in": True, "sub": "acct_1", "email": "ada@example.com", "tier": "plus", "saved_at": 100.0}

EVERY_STATE = [
    Code("s1", "ABCD-EFGH", "https://portal.example/device", "https://portal.example/device?user_code=ABCD-EFGH", 900),
    Waiting("s1"),
    Completed(email="ada@example.com", tier="plus", handoff=("github moved to your account",)),
    Cancelled(),
    TimedOut(),
    AlreadySignedIn(email="ada@example.com"),
    *(Failed(reason) for name, reason in vars(Reason).items() if not name.startswith("_")),
    *(Retrying("s1", reason, 2, 1.5) for reason in RETRY_REASONS),
    WorkerLost(account=ACCOUNT, saved=True),
    WorkerLost(account={"signed_in": False}, saved=False),
    WorkerLost(account=None, saved=None),
]


@pytest.mark.parametrize("state", EVERY_STATE, ids=lambda s: f"{s.name}-{getattr(s, 'reason', '')}")
def test_every_state_carries_both_copies_and_the_chat_copy_is_clean(state):
    wire = state.to_wire()
    assert wire["state"] == state.name
    json.dumps(wire)  # the wire form is plain data
    assert wire["copy"] and wire["copy_terminal"]
    # The chat form: no URL, no command to type, no exception text.
    assert not re.search(r"https?://|hermes |Error|Traceback|\{|\}", wire["copy"]), wire["copy"]


def test_terminal_states_are_exactly_the_six():
    assert {s.name for s in EVERY_STATE if s.terminal} == set(TERMINAL_STATES)
    assert len(TERMINAL_STATES) == 6
    assert not Code.terminal and not Waiting.terminal and not Retrying.terminal


def test_retrying_says_why_in_words_and_when_it_asks_again():
    refused = Retrying("s1", PortalUnreachable.CONNECTION_REFUSED, 1, 2.0).to_wire()
    assert refused["copy_terminal"] == "Sign-in: the Nous portal refused the connection; trying again in 2 s."
    assert (refused["reason"], refused["attempt"], refused["retry_in"]) == ("connection_refused", 1, 2.0)
    assert Retrying("s1", RETRY_BUSY, 1, 0.4).copy.endswith("trying again in 1 s.")  # never "in 0 s"
    copies = {Retrying("s1", reason, 1, 1.0).copy for reason in RETRY_REASONS}
    assert len(copies) == len(RETRY_REASONS)  # each reason its own words
    assert Retrying("s1", "from_the_future", 1, 1.0).copy == Retrying("s1", "no_connection", 1, 1.0).copy
    for copy in copies:
        assert "_" not in copy and "HTTP" not in copy  # no code, no server status


def test_a_lost_worker_is_reported_by_what_the_store_holds():
    saved = worker_lost({"signed_in": False}, ACCOUNT)
    assert (saved.saved, saved.account) == (True, ACCOUNT)
    assert "signed in to Nous as ada@example.com (saved just now)" in saved.copy_terminal
    assert "hermes auth status nous" in saved.copy_terminal
    assert worker_lost(ACCOUNT, dict(ACCOUNT)).saved is False  # the account there was before
    assert worker_lost(ACCOUNT, {**ACCOUNT, "saved_at": 200.0}).saved is True  # saved again
    assert worker_lost(ACCOUNT, {**ACCOUNT, "sub": "acct_2"}).saved is True
    assert worker_lost(ACCOUNT, {**ACCOUNT, "refreshed_at": 300.0}).saved is False  # a refresh is no save
    nothing = worker_lost({"signed_in": False}, {"signed_in": False})
    assert nothing.saved is False and "Nothing was saved." in nothing.copy_terminal
    assert worker_lost(None, ACCOUNT).saved is True  # unreadable before: the account is news
    unknown = worker_lost(ACCOUNT, None)
    assert (unknown.saved, unknown.account) == (None, None) and "could not be read" in unknown.copy_terminal


def test_each_failure_reason_has_its_own_words():
    reasons = [r for n, r in vars(Reason).items() if not n.startswith("_")]
    copies = {Failed(r).copy for r in reasons}
    assert len(copies) == len(reasons)
    assert Failed("a_code_from_the_future").copy == Failed(Reason.PORTAL_REFUSED).copy


def test_the_terminal_copy_of_a_code_names_the_link_and_the_code():
    code = EVERY_STATE[0]
    assert code.verification_uri_complete in code.copy_terminal and "ABCD-EFGH" in code.copy_terminal
    assert "ABCD-EFGH" in code.copy and "http" not in code.copy


def test_a_move_still_under_way_names_where_to_follow_it_on_the_terminal_only():
    line = (
        "Moving your guest apps to ada@example.com is still under way; this install's Nous status will show the result."
    )
    for state in ("reserved", "pending", "parked"):
        done = Completed(email="ada@example.com", tier="free", handoff=(line,), handoff_status={"state": state})
        assert done.copy_terminal == f"{done.copy}\nRun `hermes auth status nous` to see how the move ends."
        assert "hermes" not in done.copy and "`" not in done.copy
    for state in ("claimed", "gone", "failed", "expired"):
        settled = Completed(email="ada@example.com", tier="free", handoff=("x",), handoff_status={"state": state})
        assert settled.copy_terminal == settled.copy
    assert Completed(email="ada@example.com", tier="free").copy_terminal == "Signed in to Nous as ada@example.com."


def _jwt(claims: dict) -> str:
    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'HS256'})}.{part(claims)}.c2ln"


GOOD = {"sub": "acct_1", "email": "ada@example.com", "tier": "pro", "host": "https://inference.example/v1", "exp": 2e9}


def test_claims_are_read_from_the_access_token():
    assert read_claims(_jwt(GOOD)) == Claims("acct_1", "ada@example.com", "pro", "https://inference.example/v1", 2e9)


@pytest.mark.parametrize(
    "token",
    [
        None,
        "",
        "not-a-jwt",
        "a.b",
        "a.!!!.c",
        _jwt({**GOOD, "email": 7}),
        _jwt({**GOOD, "tier": "platinum"}),
        _jwt({**GOOD, "exp": "tomorrow"}),
        _jwt({**GOOD, "host": "ftp://x"}),
        _jwt({k: v for k, v in GOOD.items() if k != "sub"}),
        "a." + base64.urlsafe_b64encode(b"[1,2]").decode() + ".c",
        "x" * 20000,
    ],
)
def test_a_malformed_access_token_is_refused_without_quoting_it(token):
    with pytest.raises(InvalidAccessToken) as info:
        read_claims(token)
    if isinstance(token, str) and len(token) > 3:
        assert token not in info.value.message


CLAIMS = Claims("acct_1", "ada@example.com", "plus", "https://acct.example/v1", 2e9)


def test_a_config_on_the_welcome_route_moves_to_the_account(tmp_path):
    (tmp_path / "config.yaml").write_text(
        "# operator notes stay\nmodel:\n  route: welcome  # first run\n  provider: nous\nskin: dark\n"
    )
    assert settle.settle_after_upgrade(tmp_path, CLAIMS, "Hermes-4-70B") == "moved"
    text = (tmp_path / "config.yaml").read_text()
    assert "# operator notes stay" in text and "skin: dark" in text
    model = config.load_config(tmp_path)["model"]
    assert model == {
        "route": "account",
        "provider": "nous",
        "base_url": "https://acct.example/v1",
        "default": "Hermes-4-70B",
    }


def test_a_fresh_home_without_a_config_is_on_the_welcome_route(tmp_path):
    assert settle.settle_after_upgrade(tmp_path, CLAIMS, "Hermes-4-70B") == "moved"
    assert config.load_config(tmp_path)["model"]["default"] == "Hermes-4-70B"


def test_a_config_the_operator_pointed_elsewhere_is_kept_byte_for_byte(tmp_path):
    original = "model:\n  provider: openrouter\n  default: some/model\n"
    (tmp_path / "config.yaml").write_text(original)
    assert settle.settle_after_upgrade(tmp_path, CLAIMS, "Hermes-4-70B") == "kept"
    assert (tmp_path / "config.yaml").read_text() == original


def test_the_recommended_default_follows_the_tier():
    assert {
        t: settle.recommended_nous_default_model(t) for t in ("free", "plus", "pro")
    } == settle.RECOMMENDED_NOUS_DEFAULT_MODEL
    assert settle.recommended_nous_default_model("unknown") == settle.RECOMMENDED_NOUS_DEFAULT_MODEL["free"]


def test_a_cancel_and_the_save_decide_once_and_for_all():
    from services.auth_worker.signin import CancelFlag

    first = CancelFlag()
    assert first.cancel() and first.cancelled()
    assert not first.commit()  # the save sees the cancel and writes nothing
    second = CancelFlag()
    assert second.commit()
    assert not second.cancel() and not second.cancelled()  # too late: the save had begun
