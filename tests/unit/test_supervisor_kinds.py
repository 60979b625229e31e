"""The supervisor kinds behind one interface: unit names no profile can take, which kind owns
a gateway, acting on one only through its owner, and who supervises a process (a container
included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet import supervisors
from fleet.supervisors import (
    KINDS,
    detect_supervisor,
    errors,
    kind_module,
    launchd,
    systemd,
)
from hermes_cli.commands import gateway_manage
from shared import homes
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
    assert module.__name__ == f"fleet.supervisors.{kind}"
    for name in ("unit_name", "profile_of", "install", "find", "start", "stop", "restart"):
        assert callable(getattr(module, name)), name
    assert module.profile_of(module.unit_name("work")) == "work"


def test_an_unknown_kind_has_no_module():
    with pytest.raises(ValueError, match="unknown supervisor 'runit'"):
        kind_module("runit")


# --- who supervises this process ---------------------------------------------------------------


@pytest.fixture
def no_markers(monkeypatch, tmp_path):
    """Container marker files that do not exist: this test machine may itself be a container."""
    markers = (str(tmp_path / ".dockerenv"), str(tmp_path / ".containerenv"))
    monkeypatch.setattr(supervisors, "CONTAINER_MARKERS", markers)
    return markers


@pytest.mark.parametrize("engine", ["podman", "docker", "systemd-nspawn"])
def test_a_container_in_the_environment_is_the_container_kind(no_markers, engine):
    assert detect_supervisor({"container": engine}) == "container"
    assert detect_supervisor({}) == "unmanaged"


@pytest.mark.parametrize(
    ("env", "kind"),
    [
        ({"SUPERVISOR_ENABLED": "1"}, "supervisord"),
        ({"INVOCATION_ID": "abc"}, "systemd"),
        ({"XPC_SERVICE_NAME": "ai.hermes.gateway"}, "launchd"),
        ({"HERMES_SUPERVISOR": "systemd"}, "systemd"),
        # A gateway host under supervisord names itself in its gateways: it restarts them.
        ({"SUPERVISOR_ENABLED": "1", "HERMES_SUPERVISOR": "gateway_host"}, "gateway_host"),
    ],
)
def test_a_supervisor_inside_the_container_wins_over_it(no_markers, env, kind):
    assert detect_supervisor({**env, "container": "podman"}) == kind


@pytest.mark.parametrize("which", [0, 1])
def test_a_marker_file_counts_only_for_this_process(monkeypatch, no_markers, which):
    monkeypatch.delenv("container", raising=False)
    for name in ("HERMES_SUPERVISOR", "SUPERVISOR_ENABLED", "INVOCATION_ID", "NOTIFY_SOCKET", "XPC_SERVICE_NAME"):
        monkeypatch.delenv(name, raising=False)
    assert detect_supervisor() == "unmanaged"
    Path(no_markers[which]).touch()
    assert detect_supervisor() == "container"
    # Another process's environment, read from /proc: its filesystem is not the one seen here.
    assert detect_supervisor({}) == "unmanaged"
