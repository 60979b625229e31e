"""Who may call what: every op's declaration, the rule that reads it, grants and where they
are kept, and the cached principal a CURVE service judges each request by."""

from __future__ import annotations

import os
import stat

import pytest
import zmq

from hermes_cli import mesh_ops
from shared.gateways import ops as gateway_ops
from shared.protocol import HELLO, Code, OpSpec, Remote
from shared.transport import curve_keys, principals
from shared.transport.authorized import REFRESH, SETTLE, AuthorizedKeys, user_id
from shared.transport.call_rules import HANDSHAKE_REFUSALS, RETRYABLE
from shared.transport.principals import OWNER, Principal, judge, principal
from tests.support.error_codes import product_modules

ANY = OpSpec("look", remote=Remote.ALLOWED)
GRANTED = OpSpec("poke", remote=Remote.WITH_GRANT)
NEVER = OpSpec("secret", remote=Remote.NEVER)
REMOTE = Principal(owner=False, name="host-b", grants=frozenset({"svc.poke"}))


# --- every op declares who may call it --------------------------------------------------------


def _every_op_of_the_product() -> list[OpSpec]:
    """Every ``OpSpec`` any module of the product defines or imports, once each."""
    found: dict[int, OpSpec] = {}
    for module in product_modules():
        for value in vars(module).values():
            if isinstance(value, OpSpec):
                found[id(value)] = value
    return list(found.values())


def test_every_op_of_every_service_is_served_and_declares_who_may_call_it():
    served = {id(spec) for specs in mesh_ops.SERVED.values() for spec in specs}
    every = _every_op_of_the_product()
    assert len(every) >= 36
    for spec in every:
        assert id(spec) in served, f"op {spec.name!r} is in no service's table of hermes_cli.mesh_ops"
        assert isinstance(spec.remote, Remote), f"op {spec.name!r} declares no Remote"
    for service, specs in mesh_ops.SERVED.items():
        assert HELLO in specs and len({spec.name for spec in specs}) == len(specs), service


def test_an_op_without_a_declaration_cannot_be_made():
    with pytest.raises(TypeError, match="remote"):
        OpSpec("drain")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="who may call it"):
        OpSpec("drain", remote="allowed")  # type: ignore[arg-type]


def test_what_changes_something_takes_a_grant_and_a_token_is_never_a_remote_keys():
    grants = {service: set(mesh_ops.grantable(service)) for service in mesh_ops.SERVED}
    assert grants["gateway"] == {"gateway.turn", "gateway.drain", "gateway.reexec", "gateway.release"}
    assert grants["auth_worker"] == {"auth_worker.sign_in", "auth_worker.cancel", "auth_worker.refresh"}
    assert grants["handoff_retry"] == {"handoff_retry.drain"}
    assert grants["gateway_host"] == {f"gateway_host.{op}" for op in ("prepare", "roll", "start", "stop", "restart")}
    assert grants["updater"] == grants["hook_reporter"] == set()
    assert {"operator_sim.session.new", "operator_sim.session.stop", "operator_sim.report"} <= grants["operator_sim"]
    assert "operator_sim.session.list" not in grants["operator_sim"]
    never = [(s, spec.name) for s, specs in mesh_ops.SERVED.items() for spec in specs if spec.remote is Remote.NEVER]
    assert never == [("auth_worker", "token")]
    for specs in mesh_ops.SERVED.values():  # what a remote key may call freely only reads
        for spec in specs:
            assert spec.remote is not Remote.ALLOWED or spec.idempotent, spec.name


@pytest.mark.parametrize("grant", ["gateway.nope", "nope.drain", "drain", "", "auth_worker.token", "gateway.ping"])
def test_a_grant_of_no_op_that_takes_one_is_refused_naming_the_field(grant):
    with pytest.raises(mesh_ops.GrantInvalid) as refused:
        mesh_ops.check_grant(grant)
    assert refused.value.code == "grant_invalid" and refused.value.detail == {"field": "grant", "grant": grant}
    assert mesh_ops.check_grant("gateway.drain") == "gateway.drain"


# --- the rule --------------------------------------------------------------------------------


def test_the_owner_may_call_every_op():
    for spec in (ANY, GRANTED, NEVER):
        assert judge(OWNER, "svc", spec) is None


def test_a_remote_key_calls_what_its_op_allows_or_it_is_granted_and_never_a_never_op():
    assert judge(REMOTE, "svc", ANY) is None
    assert judge(REMOTE, "svc", GRANTED) is None
    assert judge(REMOTE, "other", GRANTED) is not None  # a grant names the service too
    assert judge(Principal(owner=False, name="x", grants=frozenset({"svc.secret"})), "svc", NEVER) is not None
    refused = judge(Principal(owner=False, name="host-b"), "svc", GRANTED)
    assert refused is not None and refused.code == Code.OP_NOT_GRANTED
    assert refused.detail == {"op": "poke", "service": "svc", "key_name": "host-b"}
    assert "--grant svc.poke" in refused.message


def test_not_granted_is_a_refusal_of_one_op_never_retried():
    assert Code.OP_NOT_GRANTED not in RETRYABLE and Code.OP_NOT_GRANTED not in HANDSHAKE_REFUSALS


def test_this_installs_own_keys_are_the_owner_and_every_other_name_a_remote_key():
    grants = {"host-b": frozenset({"svc.poke"}), "also-b": frozenset({"svc.prod"})}
    assert principal(["local"], grants) is OWNER
    assert principal(["local-previous"], grants) is OWNER
    assert principal(["host-b", "local"], grants) is OWNER  # this install's key, authorized twice
    assert principal(["host-b"], grants) == REMOTE
    both = principal(["host-b", "also-b"], grants)  # one key under two names: both names' grants
    assert not both.owner and both.grants == {"svc.poke", "svc.prod"} and both.name == "also-b, host-b"
    assert principal([], grants) == Principal(owner=False)  # a key the set no longer holds: nothing


# --- grants on disk, and as a service reads them -----------------------------------------------


def test_grants_are_kept_beside_the_key_privately_and_go_with_a_revoke(tmp_path):
    curve_keys.init(tmp_path, [])
    curve_keys.add_public(tmp_path, "authorized", "host-b", zmq.curve_keypair()[0])
    curve_keys.set_grants(tmp_path, "host-b", ["gateway.turn", "gateway.drain", "gateway.drain"])
    path = curve_keys.store(tmp_path) / "authorized" / "host-b.grants"
    assert path.read_text() == "gateway.drain\ngateway.turn\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert curve_keys.grants(tmp_path) == {"host-b": {"gateway.drain", "gateway.turn"}}
    assert set(curve_keys.public_keys(tmp_path, "authorized")) == {"local", "host-b"}  # not a key
    curve_keys.set_grants(tmp_path, "host-b", [])
    assert not path.exists() and curve_keys.grants(tmp_path) == {}
    curve_keys.set_grants(tmp_path, "host-b", ["gateway.drain"])
    curve_keys.remove_public(tmp_path, "authorized", "host-b")
    assert not path.exists()
    with pytest.raises(curve_keys.CurveKeyInvalid) as invalid:
        curve_keys.set_grants(tmp_path, "host-b", ["gateway drain"])
    assert invalid.value.detail == {"field": "grant"}


def test_a_loose_symlinked_or_garbled_grants_file_grants_nothing(tmp_path):
    curve_keys.init(tmp_path, [])
    directory = curve_keys.store(tmp_path) / "authorized"
    for name in ("loose", "garbled", "fine"):
        curve_keys.set_grants(tmp_path, name, ["gateway.drain"])
    os.chmod(directory / "loose.grants", 0o644)
    (directory / "garbled.grants").write_text("gateway.drain\nrm -rf\n")
    os.symlink(directory / "fine.grants", directory / "linked.grants")
    assert curve_keys.grants(tmp_path) == {"fine": {"gateway.drain"}}
    with pytest.raises(curve_keys.CurveKeyUnsafe):
        curve_keys.set_grants(tmp_path, "linked", [])  # refused, never followed nor repaired


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_grant_and_its_removal_reach_the_cached_principal_within_a_refresh(tmp_path):
    curve_keys.init(tmp_path, [])
    remote, local = zmq.curve_keypair()[0], curve_keys.public_keys(tmp_path, "authorized")["local"]
    curve_keys.add_public(tmp_path, "authorized", "host-b", remote)
    directory = curve_keys.store(tmp_path) / "authorized"
    clock = _Clock()
    keys = AuthorizedKeys(tmp_path, clock=clock, wall=lambda: directory.stat().st_mtime_ns + int(SETTLE * 1e9))
    user = user_id("host-b", remote).decode()
    keys.current()
    assert keys.principal(user) == Principal(owner=False, name="host-b")
    assert keys.principal(user_id("local", local).decode()) is OWNER
    curve_keys.set_grants(tmp_path, "host-b", ["gateway.drain"])
    clock.now += REFRESH
    keys.current()
    assert keys.principal(user).grants == {"gateway.drain"}
    assert principals.judge(keys.principal(user), "gateway", gateway_ops.DRAIN) is None
    curve_keys.set_grants(tmp_path, "host-b", [])
    clock.now += REFRESH
    keys.current()
    assert keys.principal(user).grants == frozenset()
