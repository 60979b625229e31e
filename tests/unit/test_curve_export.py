"""One service's own key store (``hermes mesh keys export``): its secret key alone, its own
public key trusted and authorized with the grants it is given, the other clients with only their
grants on it, never the client key; written into an empty private directory, never over one."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
import zmq

from shared.transport import curve_keys


@pytest.fixture
def root(tmp_path) -> Path:
    root = tmp_path / "home"
    curve_keys.init(root, ["gateway", "gateway@coder", "auth_worker", "hook_reporter"])
    operator = curve_keys.public_of(zmq.curve_keypair()[1])
    curve_keys.set_grants(root, "operator", ["gateway.turn", "gateway.drain", "auth_worker.sign_in"])
    curve_keys.add_public(root, "authorized", "operator", operator)
    return root


def _files(top: Path) -> dict[str, int]:
    return {
        str(Path(d, f).relative_to(top)): stat.S_IMODE(os.lstat(Path(d, f)).st_mode)
        for d, _, files in os.walk(top)
        for f in files
    }


def test_a_gateway_store_holds_its_own_secret_alone(root, tmp_path):
    home = _service_home(tmp_path, "coder")
    to = curve_keys.store(home)
    written = curve_keys.export_service(root, "gateway@coder", to, self_grants=["gateway.turn"])
    servers = ["auth_worker", "gateway", "gateway@coder", "hook_reporter"]
    assert written == [
        "server/gateway@coder",
        "authorized/self",
        *(f"servers/{n}" for n in servers),
        "authorized/operator",
    ]
    found = _files(to)
    assert sorted(found) == [
        "authorized/operator.grants",
        "authorized/operator.key",
        "authorized/self.grants",
        "authorized/self.key",
        "server/gateway@coder.key_secret",
        *(f"servers/{n}.key" for n in servers),
    ]
    assert [n for n in found if n.endswith("key_secret")] == ["server/gateway@coder.key_secret"]
    assert set(found.values()) == {0o600} and stat.S_IMODE(os.stat(to).st_mode) == 0o700
    assert (to / "authorized" / "operator.grants").read_text().split() == ["gateway.drain", "gateway.turn"]
    own = curve_keys.server_secret(root, "gateway@coder")
    assert curve_keys.public_keys(home, "authorized")["self"] == curve_keys.public_of(own)
    # Its own checks call it with its own key; the full store keeps using its client key.
    assert curve_keys.client_secret_for(home, "gateway@coder") == own
    assert curve_keys.client_secret_for(root, "gateway@coder") == curve_keys.client_secret(root)


def test_a_worker_store_gives_its_own_key_and_the_operator_no_grant_of_another_service(root, tmp_path):
    home = _service_home(tmp_path, "hooks")
    to = curve_keys.store(home)
    curve_keys.export_service(root, "hook_reporter", to)
    assert not any(name.endswith(".grants") for name in _files(to))
    # It calls another service, if at all, as itself: a key that service does not authorize.
    own = curve_keys.server_secret(root, "hook_reporter")
    assert curve_keys.client_secret_for(home, "gateway") == own
    assert "hook_reporter" not in curve_keys.public_keys(root, "authorized")


def _service_home(tmp_path: Path, name: str) -> Path:
    """A home whose key store is yet to be exported, as a service's container mounts one."""
    home = tmp_path / name
    (home / "mesh").mkdir(parents=True, mode=0o700)
    os.chmod(home, 0o700)
    return home


def test_an_existing_store_is_never_overwritten_and_a_link_is_refused(root, tmp_path):
    to = tmp_path / "store"
    curve_keys.export_service(root, "auth_worker", to)
    before = _files(to)
    with pytest.raises(curve_keys.CurveStoreExists) as refused:
        curve_keys.export_service(root, "auth_worker", to)
    assert refused.value.code == "curve_store_exists" and _files(to) == before
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "link")
    with pytest.raises(curve_keys.CurveKeyUnsafe):
        curve_keys.export_service(root, "auth_worker", tmp_path / "link")
    with pytest.raises(curve_keys.CurveKeyMissing):
        curve_keys.export_service(root, "updater", tmp_path / "none")
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize("renamed", [(), ("authorized",), ("authorized", "servers")])
def test_an_export_killed_before_its_last_rename_is_cleared_and_done_again(root, tmp_path, renamed):
    """A kill between any two of the export's renames: the next export starts over and makes
    the whole store; a kill leaves no secret key where a service would start on it."""
    whole = tmp_path / "whole"
    curve_keys.export_service(root, "gateway", whole)
    to = tmp_path / "store"
    staging = to / ".export"
    shutil.copytree(whole, staging)  # every part staged, and the kill came before server/ moved
    for sub in renamed:
        os.rename(staging / sub, to / sub)
    assert not (to / "server").exists()
    curve_keys.export_service(root, "gateway", to)
    assert _files(to) == _files(whole)


def test_what_a_killed_export_left_is_not_cleared_through_a_planted_link(root, tmp_path):
    to = tmp_path / "store"
    (to / ".export").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "keep").write_text("kept")
    os.symlink(tmp_path / "elsewhere", to / "authorized")
    with pytest.raises(curve_keys.CurveStoreExists):
        curve_keys.export_service(root, "gateway", to)
    assert (tmp_path / "elsewhere" / "keep").read_text() == "kept"
