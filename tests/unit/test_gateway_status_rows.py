"""The rows of ``hermes gateway status`` and ``list`` across hosts (``_rows``): one per
gateway, this install's first, each host's after; a host's unreached gateway never taken for
this install's profile of the same name; another host's gateway named ``HOST:PROFILE``."""

from __future__ import annotations

from pathlib import Path

from fleet.discovery import GatewayRecord, Survey, Unreached
from hermes_cli.commands.gateway_status import _host, _name, _rows
from shared.gateways import ops
from shared.protocol import Code, RemoteError


def record(profile: str, pid: int, host: str = "") -> GatewayRecord:
    return GatewayRecord(
        profile=profile,
        pid=pid,
        start_time=1,
        state=ops.RUNNING,
        code_sha=None,
        code_version=None,
        active_turns=0,
        supervisor="none",
        source="socket",
        home=Path("/r/profiles") / profile,
        host=host,
    )


def test_rows_of_every_host_are_told_apart_by_host():
    found = Survey(
        [record("coder", 2), record("default", 1), record("coder", 12, host="a"), record("default", 11, host="a")],
        [
            Unreached("coder", Path(), RemoteError(Code.TIMEOUT, "no answer"), host="b"),
            Unreached("default", Path(), RemoteError(Code.AUTH_FAILED, "refused"), host="a"),
        ],
    )
    rows = _rows(found)
    assert [(r["host"], r["profile"], r["pid"], r["state"]) for r in rows] == [
        ("", "default", 1, ops.RUNNING),
        ("", "coder", 2, ops.RUNNING),
        ("a", "default", 11, ops.RUNNING),
        ("a", "coder", 12, ops.RUNNING),
        ("b", "coder", None, "offline"),
    ]
    # A's refusal is of A's gateway, not this install's default.
    assert rows[0]["error"] is None and rows[2]["error"]["code"] == Code.AUTH_FAILED
    assert [(_name(r), _host(r)) for r in rows] == [
        ("default", "local"),
        ("coder", "local"),
        ("a:default", "a"),
        ("a:coder", "a"),
        ("b:coder", "b"),
    ]
