"""The other hosts a home names (``mesh.hosts``), their keys kept apart per host and only ever
added, and the port map another host's keys document carries."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import zmq

from hermes_cli.curve_import import ports_of
from shared import mesh_hosts
from shared.endpoint_lock import lock_says
from shared.transport import curve, curve_keys

GOOD = {"east": {"address": "10.0.0.2", "services": {"gateway": 7420, "gateway@coder": 7422, "auth_worker": 7430}}}


def _public() -> bytes:
    return zmq.curve_keypair()[0]


def test_a_host_names_its_address_and_its_services_ports():
    hosts = mesh_hosts.parse(GOOD, "mesh.hosts")
    east = hosts["east"]
    assert east.address == "10.0.0.2"
    assert east.gateways() == {"default": 7420, "coder": 7422}
    assert mesh_hosts.qualified("east", "coder") == "east:coder"
    assert mesh_hosts.qualified("", "coder") == "coder"


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ([], "mesh.hosts"),
        ({"East!": GOOD["east"]}, "mesh.hosts key"),
        ({"local": GOOD["east"]}, "mesh.hosts key"),  # the views' name for this install
        ({"east": "10.0.0.2"}, "mesh.hosts.east"),
        ({"east": {"address": "10.0.0.2", "port": 1}}, "mesh.hosts.east.port"),
        ({"east": {"address": "a b"}}, "mesh.hosts.east.address"),
        ({"east": {"address": "h", "services": {"gateway": 65535}}}, "mesh.hosts.east.services.gateway"),
        ({"east": {"address": "h", "services": {"gateway": True}}}, "mesh.hosts.east.services.gateway"),
        ({"east": {"address": "h", "services": {"Gate way": 1}}}, "mesh.hosts.east.services"),
        ({"east": {"address": "h", "services": [7420]}}, "mesh.hosts.east.services"),
    ],
)
def test_every_bad_field_is_refused_by_name(section, field):
    with pytest.raises(mesh_hosts.MeshHostsInvalid) as caught:
        mesh_hosts.parse(section, "mesh.hosts")
    assert caught.value.detail["field"] == field


def test_the_config_file_names_the_hosts(tmp_path: Path):
    (tmp_path / "config.yaml").write_text(
        "mesh:\n  hosts:\n    east:\n      address: east.example\n      services: {gateway: 7420}\n"
    )
    assert mesh_hosts.hosts(tmp_path)["east"].services == {"gateway": 7420}
    with pytest.raises(mesh_hosts.MeshHostUnknown):
        mesh_hosts.host(tmp_path, "west")


def test_a_host_endpoint_is_curve_tcp_with_nothing_here_to_lock(tmp_path: Path):
    east = mesh_hosts.parse(GOOD, "mesh.hosts")["east"]
    endpoint = mesh_hosts.endpoint(tmp_path, east, "gateway@coder")
    assert (endpoint.service, endpoint.control, endpoint.events) == (
        "gateway",
        "tcp://10.0.0.2:7422",
        "tcp://10.0.0.2:7423",
    )
    assert lock_says(endpoint) is None
    local = mesh_hosts.endpoint(tmp_path, mesh_hosts.Host("here", "127.0.0.1", {"gateway": 7420}), "gateway")
    assert lock_says(local) is None  # a loopback address of another install: still asked, never locked here
    with pytest.raises(mesh_hosts.MeshHostUnknown):
        mesh_hosts.endpoint(tmp_path, east, "hook_reporter")


def test_each_host_has_its_own_trusted_key_for_the_same_service_name(tmp_path: Path):
    curve_keys.init(tmp_path, ["gateway"])
    east, west = _public(), _public()
    assert curve_keys.add_host_keys(tmp_path, "east", {"gateway": east}) == ["gateway"]
    assert curve_keys.add_host_keys(tmp_path, "west", {"gateway": west}) == ["gateway"]
    assert curve_keys.trusted_server(tmp_path, "gateway", host="east") == east
    assert curve_keys.trusted_server(tmp_path, "gateway", host="west") == west
    assert curve_keys.trusted_server(tmp_path, "gateway") not in (east, west)  # this install's own
    host = mesh_hosts.Host("west", "10.0.0.3", {"gateway": 7420})
    options = dict(curve.client_options(mesh_hosts.endpoint(tmp_path, host, "gateway")))
    assert options[zmq.CURVE_SERVERKEY] == west


def test_an_import_adds_and_never_replaces(tmp_path: Path):
    curve_keys.init(tmp_path, [])
    first = _public()
    curve_keys.add_host_keys(tmp_path, "east", {"gateway": first})
    assert curve_keys.add_host_keys(tmp_path, "east", {"gateway": first, "gateway@coder": _public()}) == [
        "gateway@coder"
    ]
    with pytest.raises(curve_keys.CurveKeyConflict) as caught:
        curve_keys.add_host_keys(tmp_path, "east", {"auth_worker": _public(), "gateway": _public()})
    assert caught.value.detail == {"host": "east", "service": "gateway"}
    assert curve_keys.trusted_server(tmp_path, "gateway", host="east") == first
    assert "auth_worker" not in curve_keys.host_keys(tmp_path, "east")  # checked all before writing any
    assert curve_keys.forget_host_key(tmp_path, "east", "gateway") == ["gateway"]
    with pytest.raises(curve_keys.CurveKeyMissing):
        curve_keys.trusted_server(tmp_path, "gateway", host="east")


def test_a_host_key_planted_as_a_symlink_is_refused(tmp_path: Path):
    curve_keys.init(tmp_path, [])
    curve_keys.add_host_keys(tmp_path, "east", {"gateway": _public()})
    planted = curve_keys.store(tmp_path) / "hosts" / "east" / "gateway@coder.key"
    elsewhere = tmp_path / "elsewhere.key"
    elsewhere.write_bytes(_public() + b"\n")
    os.chmod(elsewhere, 0o600)
    planted.symlink_to(elsewhere)
    with pytest.raises(curve_keys.CurveKeyUnsafe):
        curve_keys.trusted_server(tmp_path, "gateway@coder", host="east")
    with pytest.raises(mesh_hosts.MeshHostsInvalid):
        curve_keys.trusted_server(tmp_path, "gateway", host="../servers")


def test_a_keys_document_carries_each_tcp_services_port():
    raw = json.dumps({"services": {"gateway": _public().decode()}, "ports": {"gateway": 7420}}).encode()
    assert ports_of(raw) == {"gateway": 7420}
    assert ports_of(json.dumps({"services": {}}).encode()) == {}
    for bad in ({"gateway": 0}, {"gateway": "7420"}, {"Bad Name": 1}, [7420]):
        with pytest.raises(curve_keys.CurveKeyInvalid):
            ports_of(json.dumps({"ports": bad}).encode())


def test_every_gateway_of_every_host_is_an_endpoint_under_its_qualified_profile(tmp_path: Path):
    (tmp_path / "config.yaml").write_text(
        "mesh:\n  hosts:\n"
        "    a:\n      address: 10.0.0.1\n      services: {gateway: 7420, gateway@coder: 7422, auth_worker: 7430}\n"
        "    b:\n      address: 10.0.0.2\n      services: {gateway@coder: 7420}\n"
    )
    found = mesh_hosts.gateway_endpoints(tmp_path)
    assert list(found) == ["a:default", "a:coder", "b:coder"]  # the auth worker is no gateway
    coder_b = found["b:coder"]
    assert (coder_b.host, coder_b.key_name, coder_b.control) == ("b", "gateway@coder", "tcp://10.0.0.2:7420")
    assert found["a:coder"].control == "tcp://10.0.0.1:7422"


def test_a_home_naming_no_host_has_no_host_gateways(tmp_path: Path):
    assert mesh_hosts.gateway_endpoints(tmp_path) == {}
    (tmp_path / "config.yaml").write_text("mesh:\n  tcp: {}\n")
    assert mesh_hosts.gateway_endpoints(tmp_path) == {}
