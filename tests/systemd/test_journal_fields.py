"""Gateways under a real systemd 252 write their records to its journal with our fields
(stderr is the journal's stream: ``JOURNAL_STREAM``), so the journal filters by profile, and
``hermes logs gateway`` reads a unit's records from it, in either scope."""

from __future__ import annotations

import json

import pytest

from fleet.supervisors.systemd import unit_name

pytestmark = pytest.mark.systemd


def entries(sandbox, *matches: str) -> list[dict]:
    shown = sandbox.run(["journalctl", "--no-pager", "--quiet", "-o", "json", *matches]).stdout
    return [json.loads(line) for line in shown.splitlines() if line.strip()]


def test_the_journal_keeps_each_profiles_records_apart(installs, sandbox):
    ours = installs("journal")
    ours.unit("coder", "system")
    ours.unit("writer", "user")
    pids = {g: ours.answering()[g]["pid"] for g in ("coder", "writer")}
    instances = {g: ours.answering()[g]["instance_id"] for g in ("coder", "writer")}

    for profile, other in (("coder", "writer"), ("writer", "coder")):
        found = entries(sandbox, f"HERMES_PROFILE={profile}")
        mine = [e for e in found if e.get("HERMES_INSTANCE_ID") == instances[profile]]
        assert any(e["MESSAGE"].startswith(f"starting: serving {profile} on code") for e in mine), found
        for entry in mine:
            assert (entry["HERMES_SERVICE"], entry["SYSLOG_IDENTIFIER"], entry["_PID"]) == (
                "gateway",
                "hermes-gateway",
                str(pids[profile]),
            )
            assert entry["PRIORITY"] == "6" and entry["CODE_FUNC"] and entry["CODE_FILE"].endswith(".py")
        assert not any(other in e["MESSAGE"] or e.get("HERMES_INSTANCE_ID") == instances[other] for e in found)
    # The unit's attribution is the journal's own: a system unit's and a user unit's.
    (coder,) = [e for e in entries(sandbox, f"HERMES_INSTANCE_ID={instances['coder']}") if "starting" in e["MESSAGE"]]
    assert coder["_SYSTEMD_UNIT"] == unit_name("coder")
    (writer,) = [e for e in entries(sandbox, f"HERMES_INSTANCE_ID={instances['writer']}") if "starting" in e["MESSAGE"]]
    assert writer["_SYSTEMD_USER_UNIT"] == unit_name("writer")


def test_hermes_logs_gateway_reads_the_units_journal(installs, sandbox):
    ours = installs("read")
    ours.unit("coder", "system")
    ours.unit("writer", "user")
    for profile in ("coder", "writer"):
        pid = ours.answering()[profile]["pid"]
        shown = ours.hermes("logs", "gateway", "--json", profile=profile)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        records = [json.loads(line) for line in shown.stdout.splitlines()]
        ours_now = [r for r in records if r.get("pid") == pid]
        assert any(r["message"].startswith(f"starting: serving {profile}") for r in ours_now), records
        assert all(r["profile"] == profile and r["service"] == "gateway" for r in ours_now)
        text = ours.hermes("logs", "gateway", "--lines", "5", profile=profile)
        assert f"gateway[{pid}] INFO starting: serving {profile}" in text.stdout, text.stdout + text.stderr
