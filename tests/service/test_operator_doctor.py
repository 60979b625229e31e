"""``hermes operator doctor``'s findings from the hook reporter's answers: the real reporter's
handlers served in this process, the command run in this process."""

from __future__ import annotations

import json

from services.hook_reporter import ops
from services.hook_reporter.app import HookReporter
from shared import homes
from shared.locks import FileLock
from shared.operator.protocol import ENDPOINT_ENV
from tests.support.cli import hermes_in_process
from tests.support.processes import python_env


def doctor(root):
    env = python_env(HERMES_HOME=str(root), POHUNEK_SESSION_ID="sess-1")
    env.pop(ENDPOINT_ENV, None)
    done = hermes_in_process("operator", "doctor", "--json", env=env)
    report = json.loads(done.stdout)
    return done.returncode, {f["check"]: f["code"] for f in report["findings"]}


def test_operator_doctor_reports_typed_findings(root, in_process, monkeypatch):
    assert doctor(root) == (
        1,
        {"session": "managed", "identity": "readable", "dry_run": "report_valid", "reporter": "reporter_unreachable"},
    )
    monkeypatch.delenv(ENDPOINT_ENV, raising=False)
    endpoint = homes.endpoint(root, ops.SERVICE)
    lock = FileLock(endpoint.lock_path)
    lock.acquire()
    try:
        in_process(endpoint, HookReporter(root, endpoint, lock, daemon=None).service)
        assert doctor(root)[1]["daemon"] == "daemon_not_configured"
    finally:
        lock.release()
