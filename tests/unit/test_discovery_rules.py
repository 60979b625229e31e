"""The pure parts of the gateway scan (``fleet.discovery``): which profiles a process
named by state files still serves, and how scanned records join the ones sockets and state
files found, once per profile for a multiplex gateway; and how other hosts' gateways are
taken from their answers."""

from __future__ import annotations

from pathlib import Path

from fleet.discovery import GatewayRecord, _of_hosts, merge_scanned, served_profiles, still_served, survey
from shared import mesh_hosts
from shared.gateways import ops
from shared.identity import ProcessIdentity
from shared.protocol import Code, RemoteError

INNER = ProcessIdentity(7, 1000)  # as the process knows itself
HOST_PID = 4242


def record(profile: str, *, source: str, served: tuple[str, ...] = (), pid: int = INNER.pid) -> GatewayRecord:
    return GatewayRecord(
        profile=profile,
        pid=pid,
        start_time=INNER.start_time,
        state=ops.RUNNING if source != "scan" else "unknown",
        code_sha=None,
        code_version=None,
        active_turns=None,
        supervisor="none",
        source=source,  # type: ignore[arg-type]
        home=Path("/r/profiles") / profile,
        served_profiles=served,
    )


def scanned(*profiles: str, served: tuple[str, ...] = ()) -> list[tuple[ProcessIdentity, GatewayRecord]]:
    return [(INNER, record(p, source="scan", served=served, pid=HOST_PID)) for p in profiles]


def test_a_profile_let_go_is_no_longer_served():
    states = {
        "coder": {"gateway_state": ops.RUNNING},
        "writer": {"gateway_state": ops.STOPPED},  # released, the process serves on
        "research": {"gateway_state": ops.DRAINING},
    }
    assert still_served(states) == ["coder", "research"]


def test_a_process_on_its_way_out_is_every_profile_its_files_name():
    assert still_served({"coder": {"gateway_state": ops.STOPPED}, "writer": {}}) == ["coder", "writer"]
    assert still_served({"coder": {"gateway_state": ops.STOPPED}}) == ["coder"]


def test_a_multiplex_process_found_for_some_profiles_brings_the_others():
    both = ("coder", "writer")
    merged = merge_scanned([record("coder", source="socket", served=both)], scanned("coder", "writer", served=both))
    assert [(r.profile, r.source, r.pid) for r in merged] == [
        ("coder", "socket", HOST_PID),
        ("writer", "scan", HOST_PID),
    ]


def test_a_multiplex_process_found_for_every_profile_is_not_listed_again():
    both = ("coder", "writer")
    found = [record("coder", source="socket", served=both), record("writer", source="state_file", served=both)]
    merged = merge_scanned(found, scanned("coder", "writer", served=both))
    assert [(r.profile, r.source) for r in merged] == [("coder", "socket"), ("writer", "state_file")]
    assert {r.pid for r in merged} == {HOST_PID}


def test_a_multiplex_process_found_by_nothing_else_is_listed_once_per_profile():
    both = ("coder", "writer")
    merged = merge_scanned([], scanned("coder", "writer", served=both))
    assert [(r.profile, r.multiplex) for r in merged] == [("coder", True), ("writer", True)]


def test_a_per_profile_gateway_found_is_never_listed_again_under_another_name():
    # The scan's guess of a per-profile process's profile (its environment) may differ from the
    # profile its socket gave: one process, one record.
    merged = merge_scanned([record("coder", source="socket")], scanned("default"))
    assert [(r.profile, r.pid) for r in merged] == [("coder", HOST_PID)]


def test_served_profiles_is_kept_only_when_it_names_the_profile():
    assert served_profiles("coder", ["default", "coder"]) == ("default", "coder")
    assert served_profiles("coder", ["writer"]) == ("coder",)
    assert served_profiles("coder", ["coder", "coder"]) == ("coder",)
    assert served_profiles("coder", "coder,writer") == ("coder",)


def _status(profile: str, pid: int) -> dict:
    return {"profile": profile, "pid": pid, "start_time": 5, "state": ops.RUNNING, "home": f"/srv/{profile}"}


def test_each_hosts_gateway_is_a_record_or_an_unreached_row_of_that_host():
    hosts = {
        "a": mesh_hosts.Host("a", "10.0.0.1", {"gateway": 7420, "gateway@coder": 7422}),
        "b": mesh_hosts.Host("b", "10.0.0.2", {"gateway@coder": 7420}),
    }
    remote = {
        mesh_hosts.qualified(name, mesh_hosts.profile_of(key)): mesh_hosts.endpoint(Path("/r"), host, key)
        for name, host in hosts.items()
        for key in host.services
    }
    answers = {
        "a:default": _status("default", 11),
        "a:coder": _status("coder", 12),
        "b:coder": RemoteError(Code.TIMEOUT, "no answer"),
    }
    found, unreached = _of_hosts(remote, answers)
    assert [(r.host, r.profile, r.pid, r.state, r.source, str(r.home)) for r in found] == [
        ("a", "default", 11, ops.RUNNING, "socket", "/srv/default"),
        ("a", "coder", 12, ops.RUNNING, "socket", "/srv/coder"),
    ]
    assert found[1].to_dict()["host"] == "a"
    [offline] = unreached
    assert (offline.host, offline.profile, offline.state) == ("b", "coder", "offline")
    assert offline.to_dict()["host"] == "b" and offline.to_dict()["home"] is None

    refused, wrong = RemoteError(Code.AUTH_FAILED, "refused"), _status("writer", 13)
    found, unreached = _of_hosts(remote, {**answers, "a:default": refused, "a:coder": wrong})
    assert found == []
    assert [(u.host, u.profile, u.state, u.error.code) for u in unreached] == [
        ("a", "default", "refused", Code.AUTH_FAILED),
        ("a", "coder", "refused", Code.MALFORMED_REPLY),  # answered as another profile: not that gateway
        ("b", "coder", "offline", Code.TIMEOUT),
    ]


def test_a_local_record_has_no_host():
    assert record("coder", source="socket").to_dict()["host"] == ""


def test_a_host_whose_keys_this_home_lacks_is_its_own_refused_row(tmp_path: Path):
    (tmp_path / "config.yaml").write_text(
        "mesh:\n  hosts:\n    east:\n      address: 10.0.0.2\n      services: {gateway@coder: 7420}\n"
    )
    found = survey(tmp_path, scan=False, remote=mesh_hosts.gateway_endpoints(tmp_path))
    assert found.records == []
    [row] = found.unreached
    assert (row.host, row.profile, row.state, row.error.code) == ("east", "coder", "refused", "curve_key_missing")
