"""The sign-in's states, claims and config settling: pure rules, no sockets."""

from __future__ import annotations

import base64
import json
import re

import pytest

from nous.access_token import Claims, InvalidAccessToken, read_claims
from services.auth_worker import settle
from services.auth_worker.states import (
    TERMINAL_STATES,
    AlreadySignedIn,
    Cancelled,
    Code,
    Completed,
    Failed,
    Reason,
    TimedOut,
    Waiting,
)
from shared import config

EVERY_STATE = [
    Code("s1", "ABCD-EFGH", "https://portal.example/device", "https://portal.example/device?user_code=ABCD-EFGH", 900),
    Waiting("s1"),
    Completed(email="ada@example.com", tier="plus", handoff=("github moved to your account",)),
    Cancelled(),
    TimedOut(),
    AlreadySignedIn(email="ada@example.com"),
    *(Failed(reason) for name, reason in vars(Reason).items() if not name.startswith("_")),
]


@pytest.mark.parametrize("state", EVERY_STATE, ids=lambda s: f"{s.name}-{getattr(s, 'reason', '')}")
def test_every_state_carries_both_copies_and_the_chat_copy_is_clean(state):
    wire = state.to_wire()
    assert wire["state"] == state.name
    json.dumps(wire)  # the wire form is plain data
    assert wire["copy"] and wire["copy_terminal"]
    # The chat form: no URL, no command to type, no exception text.
    assert not re.search(r"https?://|hermes |Error|Traceback|\{|\}", wire["copy"]), wire["copy"]


def test_terminal_states_are_exactly_the_five():
    assert {s.name for s in EVERY_STATE if s.terminal} == set(TERMINAL_STATES)
    assert not Code.terminal and not Waiting.terminal


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
