"""The hooks' part of ``hermes operator doctor``: a payload-free dry run, as typed findings.

Each finding is ``{"check", "ok", "code", "detail"}``: whether this process is in a managed
session, whether its start identity is readable, whether a report the hooks would build
passes the reporter's own checks, whether the reporter answers (with its counters), and
whether the daemon it forwards to is reachable. Nothing is sent to the daemon but a hello.
A run dir that is not private is a ``permissions`` finding (``unsafe_run_dir``): no socket in
it is asked.
The integration doctor folds them into its checks (``mesh_checks``).
"""

from __future__ import annotations

import os
import time
from typing import Any

from hermes_cli import output
from shared import homes


def _finding(check: str, ok: bool, code: str, detail: Any = None) -> dict[str, Any]:
    return {"check": check, "ok": ok, "code": code, "detail": detail}


def findings() -> list[dict[str, Any]]:
    from hermes_cli.service_client import connect
    from services.hook_reporter import ops
    from shared import hook_vocabulary, protocol
    from shared.hook_reports import ReportRefused, parse_report
    from shared.hooks import SESSION_ENV
    from shared.identity import process_identity
    from shared.operator.protocol import ENDPOINT_ENV
    from shared.protocol import RemoteError
    from shared.transport import NO_RETRY

    found: list[dict[str, Any]] = []
    session = os.environ.get(SESSION_ENV)
    if hook_vocabulary.is_id(session):
        found.append(_finding("session", True, "managed", session))
    else:
        found.append(_finding("session", True, "unmanaged", "not in a managed session: the hooks report nothing"))
    ident = process_identity(os.getpid())
    found.append(
        _finding(
            "identity",
            ident is not None,
            "readable" if ident else "identity_unreadable",
            ident.to_dict() if ident else None,
        )
    )
    if ident is not None:
        dry = {
            "v": hook_vocabulary.VERSION,
            "kind": "activity",
            "session": session if found[0]["code"] == "managed" else "dry-run",
            "pid": ident.pid,
            "start_time": ident.start_time,
            "at": time.time(),
            "state": "idle",
        }
        try:
            parse_report(protocol.pack(dry))
            found.append(_finding("dry_run", True, "report_valid"))
        except ReportRefused as exc:
            found.append(_finding("dry_run", False, f"report_{exc.reason}", exc.message))
    try:
        endpoint = homes.endpoint(homes.root_home(), ops.SERVICE, create=False)
        with connect(endpoint, retry=NO_RETRY) as client:
            status = client.call(ops.STATUS, timeout=3.0)
            check = client.call(ops.CHECK, timeout=8.0)["daemon"]
    except homes.UnsafeRunDir as exc:  # whatever socket is in such a dir is not asked
        found.append(_finding("permissions", False, exc.code, exc.message))
    except RemoteError as exc:
        found.append(_finding("reporter", False, "reporter_unreachable", exc.code))
    else:
        counters = {k: status[k] for k in ("received", "forwarded", "dropped", "queued")}
        found.append(_finding("reporter", True, "reporter_reachable", counters))
        if not check["configured"]:
            found.append(_finding("daemon", False, "daemon_not_configured", f"set {ENDPOINT_ENV} for the reporter"))
        else:
            code = "daemon_reachable" if check["reachable"] else "daemon_unreachable"
            found.append(_finding("daemon", check["reachable"], code, status["daemon"]))
    return found


def mesh_checks(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The findings as the integration doctor's last three checks."""
    from hermes_cli.operator.doctor import HINT

    by_check = {f["check"]: f for f in found}

    def verdict(code: str, *names: str) -> dict[str, Any]:
        seen = [by_check[name] for name in names if name in by_check]
        status = "not_run" if not seen else "pass" if all(f["ok"] for f in seen) else "fail"
        return {"code": code, "status": status, "recovery_hint": HINT[code]}

    return [
        verdict("hook_dry_run", "identity", "dry_run"),
        verdict("reporter_reachable", "reporter", "permissions"),
        verdict("daemon_reachable", "daemon"),
    ]


def findings_text(data: dict[str, Any]) -> str:
    rows = [
        ("ok" if f["ok"] else "FAIL", f["check"], f["code"], "" if f["detail"] is None else f["detail"])
        for f in data["findings"]
    ]
    return output.table(("", "CHECK", "FINDING", "DETAIL"), rows)
