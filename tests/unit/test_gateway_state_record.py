"""``gateway_state.json`` as the Hermes Agent writes it: read here, and vouching for its
process as the Hermes Agent's readers judge it when a command line cannot be read."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fleet import discovery, state_record
from services.gateway.state import GatewayState
from shared.files import write_json_atomic
from shared.identity import current_identity
from tests.support.gateway_states import REAL_RECORD

GATEWAY_ARGV = [sys.executable, "-m", "services.gateway"]


def real_record(**changes: object) -> dict:
    """The real writer's record, naming this very process (alive, whatever its command line)."""
    record = json.loads(REAL_RECORD.read_text())
    record.update(current_identity().to_dict())
    record.update(changes)
    return {key: value for key, value in record.items() if value is not None or key == "exit_reason"}


def ours(tmp_path: Path) -> dict:
    """A record this mesh's gateway writes, as started by its supervisor."""
    return GatewayState(
        current_identity(), "default", tmp_path, "unmanaged", None, "i" * 32, argv=GATEWAY_ARGV
    ).to_dict()


def test_the_mesh_writes_every_field_of_the_hermes_agent_in_its_shape(tmp_path):
    real, mine = json.loads(REAL_RECORD.read_text()), ours(tmp_path)
    assert (mine["kind"], mine["platforms"], mine["active_agents"]) == ("hermes-gateway", {}, mine["active_turns"])
    assert set(real) <= set(mine)
    assert {key: type(mine[key]) for key in real} == {key: type(real[key]) for key in real}
    assert state_record.vouches(mine, None)  # its own argv is a gateway's, and it says so


@pytest.mark.parametrize(
    ("record", "cmdline", "vouched"),
    [
        (real_record(), None, True),  # the command line cannot be read: kind and argv vouch
        (real_record(), [], True),  # a process between programs: the same
        (real_record(kind=None), None, False),  # no kind: the record vouches for nothing itself
        (real_record(kind="hermes-cron"), None, False),
        (real_record(argv=["/usr/bin/python3", "-m", "pytest"]), None, False),
        (real_record(argv="hermes gateway run"), None, False),
        (real_record(), ["/usr/bin/python3", "-m", "pytest"], False),  # a readable line decides
        (real_record(kind=None), GATEWAY_ARGV, True),  # an older mesh's record, its gateway alive
        (real_record(kind=None), ["/usr/bin/hermes", "gateway", "restart"], True),
    ],
)
def test_a_record_vouches_as_the_hermes_agents_readers_judge_it(record, cmdline, vouched):
    assert state_record.vouches(record, cmdline) is vouched


def discovered(root: Path) -> list[tuple]:
    return [
        (r.profile, r.pid, r.state, r.active_turns, r.served_profiles, r.source)
        for r in discovery.discover(root, scan=False)
    ]


def test_a_record_the_hermes_agent_wrote_is_read_and_kind_vouches_when_the_command_line_is_hidden(
    tmp_path, monkeypatch
):
    write_json_atomic(tmp_path / "gateway_state.json", real_record())
    pid = current_identity().pid
    # This process's command line is readable and is no gateway's: the record names a process
    # that is something else now, and is not believed.
    assert discovered(tmp_path) == []
    monkeypatch.setattr(state_record, "read_cmdline", lambda pid: None)  # a hidden /proc
    assert discovered(tmp_path) == [("default", pid, "running", 2, ("default",), "state_file")]
    write_json_atomic(tmp_path / "gateway_state.json", real_record(kind=None))
    assert discovered(tmp_path) == []


def test_a_record_without_kind_from_an_older_mesh_still_reads(tmp_path, monkeypatch):
    older = {key: value for key, value in ours(tmp_path).items() if key not in ("kind", "active_agents", "platforms")}
    write_json_atomic(tmp_path / "gateway_state.json", {**older, "gateway_state": "running", "active_turns": 1})
    monkeypatch.setattr(state_record, "read_cmdline", lambda pid: GATEWAY_ARGV)  # its gateway, alive
    assert discovered(tmp_path) == [("default", current_identity().pid, "running", 1, ("default",), "state_file")]
