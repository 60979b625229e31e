"""What the mesh sees of a multiplex gateway (one process serving several profiles), against
real processes: discovery lists it once per profile it serves, by socket, state file or scan;
``hermes gateway status|list`` mark the pid the rows share; a killed one is no gateway."""

from __future__ import annotations

import os

from fleet import discovery
from shared import homes
from shared.gateways import ops
from shared.identity import process_identity
from shared.transport.sync_client import SyncClient
from tests.support.cli import hermes, hermes_json
from tests.support.homes import make_profile
from tests.support.processes import read_state, wait_for


def profiles(root, *names):
    for name in names:
        make_profile(root, name)


def status(root):
    code, out = hermes_json("gateway", "status", home=root)
    assert code == 0, out
    return out["gateways"]


def drop_socket(root, profile):
    endpoint = homes.endpoint(homes.profile_home(profile, root), ops.SERVICE, create=False)
    os.unlink(endpoint.control.removeprefix("ipc://"))


def test_status_and_list_show_each_served_profile_and_mark_the_shared_pid(root, gateways):
    profiles(root, "coder", "writer")
    alone = gateways(root, "default")
    multiplex = gateways(root, "default", serve=["writer", "coder"])

    listed = status(root)
    assert [(g["profile"], g["pid"], g["source"]) for g in listed] == [
        ("default", alone.pid, "socket"),
        ("coder", multiplex.pid, "socket"),
        ("writer", multiplex.pid, "socket"),
    ]
    assert [(g["served_profiles"], g["multiplex"]) for g in listed] == [
        (["default"], False),
        (["coder", "writer"], True),
        (["coder", "writer"], True),
    ]
    assert len({g["instance_id"] for g in listed[1:]}) == 1

    text = hermes("gateway", "status", home=root)
    assert text.returncode == 0, text.stderr
    table = text.stdout.split("\n\n")[0]  # a blank line ends the table: the health notes follow
    rows = {line.split()[0]: line.split()[2] for line in table.splitlines()[1:] if line[0] != "*"}
    assert rows == {"default": str(alone.pid), "coder": f"{multiplex.pid}*", "writer": f"{multiplex.pid}*"}
    notes = [line for line in text.stdout.splitlines() if line.startswith("*")]
    assert notes == [f"* one process (pid {multiplex.pid}) serves coder, writer"]

    code, out = hermes_json("gateway", "list", home=root)
    assert code == 0, out
    assert [(p["profile"], p["gateway"]["pid"], p["gateway"]["multiplex"]) for p in out["profiles"]] == [
        ("default", alone.pid, False),
        ("coder", multiplex.pid, True),
        ("writer", multiplex.pid, True),
    ]
    text = hermes("gateway", "list", home=root)
    assert text.returncode == 0, text.stderr
    assert f"{multiplex.pid}* running" in text.stdout and f"{alone.pid} running" in text.stdout
    assert [line for line in text.stdout.splitlines() if line.startswith("*")] == notes


def test_two_multiplex_processes_have_a_footnote_each(root, gateways):
    profiles(root, "coder", "writer", "research")
    first = gateways(root, "default", serve=["default", "coder"])
    second = gateways(root, "default", serve=["writer", "research"])

    text = hermes("gateway", "status", home=root)
    assert text.returncode == 0, text.stderr
    assert sorted(line for line in text.stdout.splitlines() if line.startswith("*")) == sorted(
        [
            f"* one process (pid {first.pid}) serves default, coder",
            f"* one process (pid {second.pid}) serves research, writer",
        ]
    )


def test_a_killed_multiplex_gateway_is_no_gateway_of_any_profile_though_its_files_remain(root, gateways):
    profiles(root, "coder", "writer")
    multiplex = gateways(root, "default", serve=["coder", "writer"])
    code, shown = hermes_json("profile", "show", "coder", home=root)
    assert (shown["gateway_state"]["state"], shown["gateway_state"]["served_profiles"]) == (
        "running",
        ["coder", "writer"],
    )
    multiplex.proc.kill()
    multiplex.proc.wait(timeout=10)
    for name in ("coder", "writer"):
        state = read_state(homes.profile_home(name, root))
        assert (state["pid"], state["gateway_state"]) == (multiplex.pid, "running")  # written by the dead process

    assert discovery.discover(root) == []
    assert status(root) == []
    code, out = hermes_json("gateway", "list", home=root)
    assert code == 0, out
    assert [(p["profile"], p["gateway"]) for p in out["profiles"]] == [
        ("default", None),
        ("coder", None),
        ("writer", None),
    ]
    text = hermes("gateway", "list", home=root)
    assert text.returncode == 0, text.stderr
    for line in text.stdout.splitlines()[1:]:
        assert line.split()[-1] == "-", line
    assert "*" not in text.stdout
    # Nor does a profile's own view take the dead process's last word for it.
    for name in ("coder", "writer"):
        code, shown = hermes_json("profile", "show", name, home=root)
        assert code == 0, shown
        assert (shown["gateway_state"]["state"], shown["gateway_state"]["said"]) == ("ended", "running")
        text = hermes("profile", "show", name, home=root).stdout
        assert f"not running: its process (pid {multiplex.pid}) ended while running" in text


def test_a_multiplex_gateway_without_sockets_is_found_once_per_profile(root, gateways):
    profiles(root, "coder", "writer")
    multiplex = gateways(root, "default", serve=["coder", "writer"])
    for name in ("coder", "writer"):
        drop_socket(root, name)

    records = discovery.discover(root)  # by the state files, not again by the scan
    assert [(r.profile, r.pid, r.source, r.state) for r in records] == [
        ("coder", multiplex.pid, "state_file", "running"),
        ("writer", multiplex.pid, "state_file", "running"),
    ]
    assert all(r.served_profiles == ("coder", "writer") for r in records)
    scanned = discovery.scan_gateways(root)
    assert [(r.profile, r.pid, r.state, r.served_profiles) for r in scanned] == [
        ("coder", multiplex.pid, "running", ("coder", "writer")),
        ("writer", multiplex.pid, "running", ("coder", "writer")),
    ]

    for name in ("coder", "writer"):  # nothing left but its command line
        os.unlink(homes.profile_home(name, root) / "gateway_state.json")
    records = discovery.discover(root)
    assert [(r.profile, r.pid, r.source, r.state, r.served_profiles) for r in records] == [
        ("coder", multiplex.pid, "scan", "unknown", ("coder", "writer")),
        ("writer", multiplex.pid, "scan", "unknown", ("coder", "writer")),
    ]
    assert {r.start_time for r in records} == {process_identity(multiplex.pid).start_time}
    assert discovery.discover(root, scan=False) == []
    assert [(g["profile"], g["source"], g["multiplex"]) for g in status(root)] == [
        ("coder", "scan", True),
        ("writer", "scan", True),
    ]


def test_a_profile_the_multiplex_gateway_let_go_is_not_found_again(root, gateways):
    profiles(root, "coder", "writer", "research")
    multiplex = gateways(root, "default", serve=["coder", "writer", "research"])
    writer = homes.endpoint(homes.profile_home("writer", root), ops.SERVICE, create=False)
    with SyncClient(writer.control) as client:
        client.call(ops.RELEASE, {"deadline": 5.0}, timeout=15)

    def let_go() -> bool:
        return (read_state(homes.profile_home("writer", root)) or {}).get("gateway_state") == "stopped"

    wait_for(let_go, timeout=15, what="writer let go")
    assert read_state(homes.profile_home("writer", root))["pid"] == multiplex.pid  # its file still names the process
    for name in ("coder", "research"):
        drop_socket(root, name)

    assert [(r.profile, r.source, r.served_profiles) for r in discovery.discover(root)] == [
        ("coder", "state_file", ("coder", "research")),
        ("research", "state_file", ("coder", "research")),
    ]
    assert [r.profile for r in discovery.scan_gateways(root)] == ["coder", "research"]


def test_another_installs_multiplex_gateway_is_foreign(root, short_dir, gateways):
    profiles(root, "coder")
    other = short_dir / "other"
    other.mkdir()
    profiles(other, "coder", "writer")
    theirs = gateways(other, "default", serve=["coder", "writer"])

    assert discovery.discover(root) == []
    assert discovery.scan_gateways(root) == []
    foreign = [f for f in discovery.scan_foreign(root) if f["pid"] == theirs.pid]
    assert [(f["kind"], f["root"]) for f in foreign] == [("process", str(other))]
    assert theirs.pid not in {f["pid"] for f in discovery.scan_foreign(other)}
    assert [r.profile for r in discovery.discover(other)] == ["coder", "writer"]
