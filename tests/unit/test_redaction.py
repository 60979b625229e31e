"""What is a secret and how it is hidden (``shared.redaction``): one rule for logs, receipts,
JSON and messages."""

from __future__ import annotations

import pytest

from shared.redaction import MARKER as REDACTED
from shared.redaction import redact, redact_text

JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
ANON = "anon_4f9a1c2e8b7d6a5f3e2d1c0b"


def test_redact_secret_keys_at_any_depth():
    value = {
        "access_token": "opaque",
        "Authorization": "Bearer x",
        "X-Api-Key": "k",
        "nested": [{"client_secret": {"deep": 1}}, {"password": None}, {"db_passwd": "p"}],
        "Set-Cookie": "sid=1",
        "private-key": "-----BEGIN",
        "credentials": ["a", "b"],
        "token_count": 12,  # the rule is "contains": over-redaction is the safe failure
        "profile": "default",
        "count": 3,
        "ok": True,
    }
    out = redact(value)
    hidden = ("access_token", "Authorization", "X-Api-Key", "Set-Cookie", "private-key", "credentials", "token_count")
    for key in hidden:
        assert out[key] == REDACTED, key
    assert out["nested"] == [{"client_secret": REDACTED}, {"password": REDACTED}, {"db_passwd": REDACTED}]
    assert (out["profile"], out["count"], out["ok"]) == ("default", 3, True)
    assert value["access_token"] == "opaque"  # a copy; the input is untouched


@pytest.mark.parametrize(
    ("text", "kept", "gone"),
    [
        (JWT, "", JWT),
        (f"auth failed for {JWT}.", "auth failed for", JWT.split(".")[0]),
        (ANON, "", ANON[5:]),
        (f"portal said {ANON} is unknown", "portal said", ANON[5:]),
        ("Authorization: Bearer abc.def-ghi", "Authorization", "abc.def-ghi"),
        ("fetch https://x-access-token:s3cr3tvalue@github.com/o/r.git", "github.com/o/r.git", "s3cr3tvalue"),
        ("OPENAI_API_KEY=sk-live-abcdefghijklmnop and more", "and more", "sk-live"),
        ("push ghp_0123456789abcdefghijABCDEFGHIJ", "push", "ghp_0123456789"),
        ("password: 'hunter2 hunter2' ok", "ok", "hunter2"),
    ],
)
def test_redact_secret_looking_strings(text, kept, gone):
    out = redact(text)
    assert gone not in out and REDACTED in out
    assert kept in out


def test_redact_leaves_innocuous_strings():
    for text in ("anon_short", "eyJ", "already up to date: the code did not change", "a" * 40, "tokenizer ready"):
        assert redact(text) == text


def test_redact_argv_flag_values():
    argv = ["hermes", "update", "--token", "plain-value", "--api-key=k123", "--branch", "main", "--no-backup"]
    expected = ["hermes", "update", "--token", REDACTED, f"--api-key={REDACTED}", "--branch", "main", "--no-backup"]
    assert redact(argv) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("https://user:tok@host/a.git", f"https://{REDACTED}@host/a.git"),
        ("https://ghp_as_the_user@host/a.git", f"https://{REDACTED}@host/a.git"),  # a token as the user name
        ("https://u:p@ss@host/x", f"https://{REDACTED}@host/x"),  # a password holding "@"
        ("https://h/a.zip?sig=s1g&expires=9#frag", f"https://h/a.zip?sig={REDACTED}&expires={REDACTED}#frag"),
        ("https://h/a?flag", f"https://h/a?{REDACTED}"),
        ("see https://h/a/b for more", "see https://h/a/b for more"),
        ("git@github.com:o/r.git", "git@github.com:o/r.git"),  # scp-style: no userinfo, nothing hidden
    ],
)
def test_a_urls_userinfo_and_query_values_are_hidden(text, expected):
    assert redact_text(text) == expected


def test_hiding_twice_changes_nothing():
    text = f"fetch https://u:p@h/a?token=t and Authorization: Bearer abc {JWT} password=x"
    once = redact_text(text)
    assert redact_text(once) == once and "p@h" not in once and "token=t " not in once
