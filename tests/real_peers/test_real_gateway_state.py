"""``gateway_state.json`` written by the real Hermes Agent's own code, read by this mesh."""

from __future__ import annotations

import signal

from fleet import discovery, state_record
from tests.support.cli import hermes_json
from tests.support.gateway_states import real_gateway_record
from tests.support.view_lines import GIVE_UP, next_row, start_view


def listed(root, **options):
    return [(r.profile, r.pid, r.state, r.active_turns, r.source) for r in discovery.discover(root, **options)]


def test_a_record_the_real_gateway_writer_wrote_is_read_by_list_status_and_profile_show(
    real_hermes_agent, tmp_path, monkeypatch
):
    root = tmp_path / ".hermes"
    root.mkdir()
    with real_gateway_record(real_hermes_agent, tmp_path, root) as (proc, record):
        assert (record["kind"], record["pid"]) == ("hermes-gateway", proc.pid)
        assert set(record["platforms"]) == {"telegram", "discord"}
        running = [("default", proc.pid, "running", 2, "state_file")]
        assert listed(root, scan=False) == running
        assert listed(root, scan=True) == running  # the scan finds the same process: listed once
        code, shown = hermes_json("profile", "show", home=root)
        assert code == 0 and (shown["gateway_state"]["state"], shown["gateway_state"]["pid"]) == ("running", proc.pid)

        # Where its command line cannot be read, the record's kind and argv vouch for it, as
        # the real readers judge it.
        monkeypatch.setattr(state_record, "read_cmdline", lambda pid: None)
        assert listed(root, scan=False) == running
        without_kind = {key: value for key, value in record.items() if key != "kind"}
        assert not state_record.vouches(without_kind, None)
        monkeypatch.undo()
    assert listed(root, scan=False) == []  # its process ended
    code, shown = hermes_json("profile", "show", home=root)
    assert (shown["gateway_state"]["state"], shown["gateway_state"]["said"]) == ("ended", "running")


def test_the_fleet_view_shows_the_real_gateway_by_its_record_running_then_down(real_hermes_agent, tmp_path):
    root = tmp_path / ".hermes"
    root.mkdir()
    view = None
    try:
        with real_gateway_record(real_hermes_agent, tmp_path, root) as (proc, _):
            view = start_view(root)
            shown = next_row(view, lambda r: r["profile"] == "default" and r["state"] == "running")
            assert (shown["pid"], shown["active_turns"]) == (proc.pid, 2)
        gone = next_row(view, lambda r: r["profile"] == "default" and r["state"] != "running")
        assert (gone["state"], gone["pid"]) == ("down", None)  # its process ended
        view.send_signal(signal.SIGINT)
        assert view.wait(timeout=GIVE_UP) == 0
    finally:
        if view is not None:
            view.kill()
            view.wait(timeout=10)
