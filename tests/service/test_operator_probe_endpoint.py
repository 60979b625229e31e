"""The probe's forced reporter failure: its endpoint fails a report at the connect, at once,
as an ``error``, where a plain path nothing listens on is only "not accepted" (which the
native-id claim would retry for about a second)."""

from __future__ import annotations

from hermes_cli.operator.probe_script import DRY_RUN_SESSION, unreachable_endpoint
from shared.hooks import ENDPOINT_ENV, SESSION_ENV, HookClient


def client(endpoint: str) -> HookClient:
    return HookClient({SESSION_ENV: DRY_RUN_SESSION, ENDPOINT_ENV: endpoint})


def test_the_forced_endpoint_fails_every_report_as_an_error_and_leaves_its_directory_empty(tmp_path):
    reports = client(unreachable_endpoint(tmp_path))
    try:
        assert reports.report_native_id("conv_a") is False
        assert reports.report_activity("working") is False
        assert reports.counters() == {"sent": 0, "unmanaged": 0, "refused": 0, "not_accepted": 0, "error": 2}
    finally:
        reports.close()
    assert list(tmp_path.iterdir()) == []


def test_a_plain_path_nobody_listens_on_is_only_not_accepted(tmp_path):
    reports = client(f"ipc://{tmp_path / 'hook_reporter.in'}")
    try:
        assert reports.report_native_id("conv_a") is False
        assert reports.counters()["not_accepted"] == 1 and reports.counters()["error"] == 0
    finally:
        reports.close()


def test_the_forced_endpoint_is_longer_than_any_unix_socket_address(tmp_path):
    endpoint = unreachable_endpoint(tmp_path)
    assert endpoint.startswith(f"ipc://{tmp_path.resolve()}/")
    assert len(endpoint.removeprefix("ipc://").encode()) > 108
