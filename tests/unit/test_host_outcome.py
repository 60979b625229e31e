"""Asking other hosts: how a call's end is judged (``ok``, ``offline``, ``refused``, ...), the rows
``auth status`` and the checks ``doctor`` make of it, and the refusals that come before any
host is asked. No socket: a host that is asked is the e2e tier's."""

from __future__ import annotations

import json

import pytest

from hermes_cli import host_checks, host_outcome
from hermes_cli.commands import auth
from shared import mesh_hosts
from shared.errors import HermesError
from shared.protocol import Code, RemoteError
from shared.transport import curve_keys
from tests.support.cli import hermes_in_process

EAST = mesh_hosts.Host("east", "10.0.0.2", {"gateway": 7420, "auth_worker": 7430})


@pytest.mark.parametrize(
    ("result", "state"),
    [
        ({"pong": True}, "ok"),
        (RemoteError(Code.TIMEOUT, "no answer"), "offline"),
        (RemoteError(Code.CONNECTION_LOST, "dropped"), "offline"),
        (RemoteError(Code.UNAVAILABLE, "nobody"), "offline"),
        (RemoteError(Code.AUTH_FAILED, "not authorized"), "refused"),
        (RemoteError(Code.SERVER_KEY_MISMATCH, "another key"), "refused"),
        (curve_keys.CurveKeyMissing("no key"), "untrusted"),
        (RemoteError("not_granted", "needs a grant"), "error"),
    ],
)
def test_an_end_is_judged_by_its_typed_code(result, state):
    outcome = host_outcome.judge(result)
    assert outcome.state == state
    if isinstance(result, HermesError):
        assert (outcome.code, outcome.message, outcome.answer) == (result.code, result.message, None)
    else:
        assert (outcome.code, outcome.answer) == (None, result)


def test_the_key_stores_code_for_a_missing_key_is_the_one_judged():
    assert host_outcome.KEY_MISSING == curve_keys.CurveKeyMissing.code


SECRETS = {"access_token": "at-SECRET", "refresh_token": "rt-SECRET", "device_code": "dc-SECRET"}


def _status_answer(**account):
    return {"account": {"sub": "u1", "email": "ada@example.com", "tier": "pro", **account}, "pid": 1}


@pytest.mark.parametrize(
    ("answer", "state", "signed_in"),
    [
        (_status_answer(needs_sign_in=False), "signed_in", True),
        (_status_answer(needs_sign_in=True, needs_sign_in_reason="refresh_revoked"), "needs_sign_in", False),
        ({"account": {"signed_in": False}}, "not_signed_in", False),
        ({}, "not_signed_in", False),
    ],
)
def test_a_hosts_row_says_its_sign_in(answer, state, signed_in):
    row = auth._host_row("east", host_outcome.judge(answer))
    assert (row["host"], row["state"], row["signed_in"], row["code"]) == ("east", state, signed_in, None)


def test_a_hosts_row_keeps_nothing_but_the_public_fields_whatever_the_host_sent():
    row = auth._host_row("east", host_outcome.judge(_status_answer(**SECRETS)))
    assert row["account"]["email"] == "ada@example.com"
    shown = json.dumps(row) + "\n".join(auth._host_lines({"hosts": [row]}))
    assert not any(secret in shown for secret in SECRETS.values())


def test_a_host_not_answering_is_an_offline_row_with_its_code():
    row = auth._host_row("east", host_outcome.judge(RemoteError(Code.TIMEOUT, "no answer")))
    assert row == {"host": "east", "state": "offline", "signed_in": None, "account": None, "code": "timeout"}
    assert auth._host_lines({"hosts": [row]}) == ["Other hosts:", "  host east: offline (timeout)"]


@pytest.mark.parametrize(
    ("result", "status", "trusted", "words"),
    [
        ({"hello": True}, "ok", True, "answered"),
        (RemoteError(Code.TIMEOUT, "no answer"), "warn", True, "offline"),
        (RemoteError(Code.AUTH_FAILED, "not authorized"), "fail", True, "refused (auth_failed)"),
        (curve_keys.CurveKeyMissing("no key"), "fail", False, "trusts no key"),
    ],
)
def test_a_doctor_check_says_how_asking_ended_and_whether_a_key_is_trusted(result, status, trusted, words):
    check = host_checks._check(EAST, "auth_worker", 7430, trusted, host_outcome.judge(result))
    assert (check.name, check.status) == ("host east: auth_worker", status)
    assert words in check.message and "10.0.0.2:7430" in check.message
    detail = check.detail
    assert (detail["host"], detail["service"], detail["trusted"]) == ("east", "auth_worker", trusted)
    assert detail["state"] == host_outcome.judge(result).state


def _name_east(root, services: str) -> None:
    (root / "config.yaml").write_text(
        f"mesh:\n  hosts:\n    east:\n      address: 10.0.0.2\n      services: {services}\n"
    )


def test_a_login_on_a_host_that_names_no_auth_worker_is_refused_naming_it(root):
    _name_east(root, "{gateway: 7420}")
    done = hermes_in_process("auth", "login", "nous", "--host", "east", "--no-browser", "--json", home=root)
    error = json.loads(done.stdout.splitlines()[-1])["error"]
    assert (done.returncode, error["code"], error["detail"]["host"]) == (1, "mesh_host_unknown", "east")
    assert "'east'" in error["message"] and "auth_worker" in error["message"]
    unknown = hermes_in_process("auth", "login", "nous", "--host", "west", "--no-browser", "--json", home=root)
    assert json.loads(unknown.stdout.splitlines()[-1])["error"]["code"] == "mesh_host_unknown"


def test_status_asks_only_the_hosts_that_name_an_auth_worker(root):
    _name_east(root, "{gateway: 7420}")  # nothing to ask: no socket is opened
    done = hermes_in_process("auth", "status", "nous", "--json", home=root)
    assert (done.returncode, json.loads(done.stdout)["hosts"]) == (0, [])
    assert "Other hosts" not in hermes_in_process("auth", "status", "nous", home=root).stdout


def test_doctor_names_a_host_whose_keys_this_home_lacks_without_asking_it(root):
    _name_east(root, "{gateway: 7420, auth_worker: 7430}")  # no keys imported: nothing is asked
    checks = {check.name: check for check in host_checks.host_checks(root)}
    assert set(checks) == {"host east: gateway", "host east: auth_worker"}
    for check in checks.values():
        assert (check.status, check.detail["state"], check.detail["trusted"]) == ("fail", "untrusted", False)
        assert check.detail["code"] == "curve_key_missing"


def test_doctor_fails_a_hosts_section_it_cannot_read_and_goes_on(root):
    (root / "config.yaml").write_text("mesh:\n  hosts:\n    East!: {address: 10.0.0.2}\n")
    [check] = host_checks.host_checks(root)
    assert (check.name, check.status, check.detail["code"]) == ("hosts", "fail", "mesh_hosts_invalid")
