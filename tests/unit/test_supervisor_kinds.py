"""The supervisor kinds behind one interface: unit names no profile can take, which kind owns
a gateway, and acting on one only through its owner."""

from __future__ import annotations

import pytest

from hermes_cli.commands import gateway_manage
from shared import homes
from shared.supervisors import (
    KINDS,
    errors,
    kind_module,
    launchd,
    systemd,
)
from tests.support.supervisors import KINDS_HERE, SYSTEMD_RUNNING


@pytest.mark.parametrize("module", [systemd, launchd])
@pytest.mark.parametrize("bad", ["Foo", "", "-x", "a.b", "x" * 65])
def test_invalid_profile_has_no_unit_name(module, bad):
    with pytest.raises(homes.InvalidProfileName):
        module.unit_name(bad)


def test_foo_never_claims_foobar():
    assert systemd.profile_of(systemd.unit_name("foobar")) != "foo"
    assert launchd.profile_of(launchd.unit_name("foobar")) != "foo"


# --- which kind owns a gateway ------------------------------------------------------------------


def test_acting_on_an_unsupervised_gateway_is_refused(user_dirs, profile, tmp_path):
    with pytest.raises(gateway_manage.NotSupervised) as raised:
        gateway_manage.act("restart", profile, tmp_path / "home", kinds=KINDS_HERE)
    assert raised.value.code == "not_supervised"
    assert "hermes gateway install" in raised.value.message and "hermes mesh up" in raised.value.message


@pytest.mark.skipif(SYSTEMD_RUNNING, reason="systemd runs here; this must not act on a real manager")
def test_acting_goes_through_the_owner(user_dirs, profile, tmp_path):
    home = tmp_path / "home"
    systemd.install(profile, home, scope="user")
    with pytest.raises(errors.SupervisorUnavailable):
        gateway_manage.act("start", profile, home, kinds=KINDS_HERE)


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_is_one_module_with_the_one_interface(kind):
    module = kind_module(kind)
    assert module.__name__ == f"shared.supervisors.{kind}"
    for name in ("unit_name", "profile_of", "install", "find", "start", "stop", "restart"):
        assert callable(getattr(module, name)), name
    assert module.profile_of(module.unit_name("work")) == "work"


def test_an_unknown_kind_has_no_module():
    with pytest.raises(ValueError, match="unknown supervisor 'runit'"):
        kind_module("runit")
