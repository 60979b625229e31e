"""The key store as a kubelet mounts a Secret there: accepted as laid out, refused when unsafe.

The process is made to look like a pod's (uid 12345, gid 0, the pod's fsGroup 2000 as a
supplementary group) and the volume is laid out as the kubelet lays a Secret out
(``tests.support.kubelet_volume``). Each refusal is of that layout with one thing changed, and
the keys it did not touch still read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import zmq

from shared.transport import curve_keys
from shared.transport.server_key import ServerKey
from tests.support.kubelet_volume import STAMP, lay_out_secret, update_secret

ME = 12345  # an arbitrary uid that owns nothing here
FS_GROUP = 2000  # the pod's fsGroup, one of our groups
STRANGER = 4242  # a uid and gid that are not ours

SERVER = zmq.curve_keypair()[1]
CLIENT = zmq.curve_keypair()[1]


@pytest.fixture
def pod(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: ME)
    monkeypatch.setattr(os, "getegid", lambda: 0)
    monkeypatch.setattr(os, "getgroups", lambda: [0, FS_GROUP])


@pytest.fixture
def root(tmp_path, pod):
    """A pod's root home with the gateway's Secret mounted at its key store."""
    home = tmp_path / "home"
    home.mkdir()
    mesh = home / "mesh"
    mesh.mkdir()  # the mount point's parent, as the container engine makes it: root's, 0755
    os.chmod(mesh, 0o755)
    gateway_public = curve_keys.public_of(SERVER)
    lay_out_secret(
        curve_keys.store(home),
        {
            "server/gateway.key_secret": SERVER + b"\n",
            "client.key_secret": CLIENT + b"\n",
            "servers/gateway.key": gateway_public + b"\n",
            "authorized/local.key": curve_keys.public_of(CLIENT) + b"\n",
            "authorized/probe.key": curve_keys.public_of(CLIENT) + b"\n",
            "authorized/probe.grants": b"gateway.turn\n",
        },
        fs_group=FS_GROUP,
    )
    return home


def refused(call, path: Path, why: str) -> None:
    with pytest.raises(curve_keys.CurveKeyUnsafe) as caught:
        call()
    assert caught.value.code == "curve_key_unsafe"
    assert caught.value.detail["path"] == str(path)
    assert why in caught.value.message


def refusal(call) -> curve_keys.CurveKeyUnsafe:
    """The refusal ``call`` ends with; what it says is the caller's to check."""
    with pytest.raises(curve_keys.CurveKeyUnsafe) as caught:
        call()
    return caught.value


def mount_of(root: Path) -> Path:
    return curve_keys.store(root)


def test_a_secret_laid_out_by_the_kubelet_is_read(root):
    mount = mount_of(root)
    assert stat.S_IMODE(os.lstat(mount).st_mode) == 0o3777  # the layout is the kubelet's
    assert os.readlink(mount / "server") == "..data/server"
    assert stat.S_IMODE(os.stat(mount / "server" / "gateway.key_secret").st_mode) == 0o440
    assert curve_keys.server_secret(root, "gateway") == SERVER
    assert curve_keys.client_secret(root) == CLIENT
    assert curve_keys.trusted_server(root, "gateway") == curve_keys.public_of(SERVER)
    assert curve_keys.public_keys(root, "authorized") == {
        "local": curve_keys.public_of(CLIENT),
        "probe": curve_keys.public_of(CLIENT),
    }
    assert curve_keys.grants(root) == {"probe": frozenset({"gateway.turn"})}
    assert curve_keys.server_names(root) == ["gateway"]


def test_a_top_level_link_out_of_the_mount_is_refused_and_the_rest_still_read(root, tmp_path):
    mount = mount_of(root)
    evil = tmp_path / "x" / "evil.key"
    evil.parent.mkdir()
    evil.write_bytes(zmq.curve_keypair()[1] + b"\n")
    os.chmod(evil, 0o440)
    (mount / "client.key_secret").unlink()
    os.symlink(evil, mount / "client.key_secret")
    refused(lambda: curve_keys.client_secret(root), mount / "client.key_secret", "leads out of its kubelet volume")
    assert curve_keys.server_secret(root, "gateway") == SERVER


@pytest.mark.parametrize("target", ["../../elsewhere", "/tmp/elsewhere"])
def test_data_pointing_outside_the_mount_is_refused(root, target):
    mount = mount_of(root)
    (mount / "..data").unlink()
    os.symlink(target, mount / "..data")
    for call, path in (
        (lambda: curve_keys.client_secret(root), mount / "client.key_secret"),
        (lambda: curve_keys.server_secret(root, "gateway"), mount / "server"),
    ):
        refused_as = refusal(call)
        assert refused_as.detail["path"] == str(path)
        assert "leads out of its kubelet volume" in refused_as.message


def test_a_link_inside_the_mount_to_another_entry_is_followed(root):
    mount = mount_of(root)
    (mount / "client.key_secret").unlink()
    os.symlink(f"{mount}/{STAMP}/client.key_secret", mount / "client.key_secret")  # absolute, but inside
    assert curve_keys.client_secret(root) == CLIENT


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        pytest.param(0o666, "others may write it", id="0666"),
        pytest.param(0o604, "anyone may read it", id="0604"),
        pytest.param(0o460, "others may write it", id="0460"),
    ],
)
def test_a_key_writable_by_others_or_readable_by_anyone_is_refused(root, mode, why):
    mount = mount_of(root)
    os.chmod(mount / STAMP / "server" / "gateway.key_secret", mode)
    refused(lambda: curve_keys.server_secret(root, "gateway"), mount / "server" / "gateway.key_secret", why)
    assert curve_keys.client_secret(root) == CLIENT


def test_a_key_of_another_owner_or_of_a_group_not_ours_is_refused(root):
    mount = mount_of(root)
    secret = mount / STAMP / "server" / "gateway.key_secret"
    os.chown(secret, STRANGER, FS_GROUP)
    refused(lambda: curve_keys.server_secret(root, "gateway"), mount / "server" / "gateway.key_secret", "uid 4242")
    os.chown(secret, 0, STRANGER)
    refused(
        lambda: curve_keys.server_secret(root, "gateway"), mount / "server" / "gateway.key_secret", "not one of ours"
    )
    assert curve_keys.client_secret(root) == CLIENT


def test_a_link_of_another_owner_is_refused(root):
    mount = mount_of(root)
    os.lchown(mount / "server", STRANGER, STRANGER)
    refused(lambda: curve_keys.server_secret(root, "gateway"), mount / "server", "owned by uid 4242")
    assert curve_keys.client_secret(root) == CLIENT


def test_a_mount_others_may_change_is_refused(root):
    mount = mount_of(root)
    os.chmod(mount, 0o2777)  # writable by all, without the sticky bit: a name could be swapped
    refused(lambda: curve_keys.client_secret(root), mount, "others may change what is in it")
    os.chmod(mount, 0o3777)
    os.chmod(mount / STAMP / "server", 0o2775)
    refused(lambda: curve_keys.server_secret(root, "gateway"), mount / "server", "others may change")
    assert curve_keys.client_secret(root) == CLIENT


def test_a_kubelet_volume_is_never_written(root):
    with pytest.raises(curve_keys.CurveKeyUnsafe) as caught:
        curve_keys.add_public(root, "authorized", "ops", curve_keys.public_of(CLIENT))
    assert "kubelet volume" in caught.value.message
    assert caught.value.detail["path"] == str(mount_of(root))


def test_the_same_files_without_data_are_an_ordinary_store_and_refused(root):
    """Recognition is by ``..data``: root's files with links are not private keys anywhere else."""
    mount = mount_of(root)
    os.chown(root / "mesh", ME, 0)  # ours and private: the store itself is judged
    os.chmod(root / "mesh", 0o700)
    (mount / "..data").unlink()
    os.symlink(STAMP, mount / "data")
    for top in ("client.key_secret", "server"):
        (mount / top).unlink()
        os.symlink(f"data/{top}", mount / top)
    refused_as = refusal(lambda: curve_keys.client_secret(root))
    assert refused_as.detail["path"] == str(mount)
    assert "owned by uid 0" in refused_as.message


def test_a_secret_the_kubelet_updates_gives_the_service_its_new_key(root):
    """A rotation on Kubernetes: the Secret changes, the kubelet swaps ``..data``, and the
    service following its key file takes the new key."""
    key = ServerKey(root, "gateway", curve_keys.server_secret(root, "gateway"))
    assert key.replaced() is None
    new = zmq.curve_keypair()[1]
    update_secret(mount_of(root), "server/gateway.key_secret", new + b"\n", stamp="..2026_12_04_11_00_00.987654321")
    assert key.replaced() == new
    assert curve_keys.client_secret(root) == CLIENT
