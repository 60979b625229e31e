"""``hermes operator install|update|status|doctor|uninstall``: the operator plugin in one Hermes home.

Every result is the status document of the target (``hermes_cli.operator.status``), so a
script reads the same shape whichever command it ran. Install and update need the selected
official package; uninstall needs none. ``--agent codex|claude`` is refused with a typed
code: this mesh serves Hermes only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hermes_cli import output
from hermes_cli.operator import doctor, hermes_bin, lifecycle, settings, source, status
from hermes_cli.operator.errors import IntegrationError
from hermes_cli.operator.target import require_policy_outside, resolve
from runtime_package import paths
from shared.operator.policy import BOUNDS, Policy
from shared.operator.protocol import ENDPOINT_ENV


class AgentNotServed(IntegrationError):
    code = "agent_not_served"


class ActionUnsupported(IntegrationError):
    code = "integration_action_unsupported"


def _agent(args, action: str) -> None:
    if args.agent == "hermes":
        return
    if action in ("update", "doctor", "uninstall"):
        raise ActionUnsupported(f"{action} is a Hermes-only action", detail={"agent": args.agent, "action": action})
    raise AgentNotServed(f"this mesh serves the hermes agent only, not {args.agent}", detail={"agent": args.agent})


def _change(args, *, judge_bin: bool = True) -> lifecycle.Change:
    """The target and the Hermes executable: judged before anything runs, except where a
    report says what is wrong with it (status, doctor)."""
    target = resolve(args.hermes_profile, args.hermes_home)
    path = args.hermes_bin or hermes_bin.default_bin()
    if judge_bin:
        hermes_bin.check_bin(path)
    return lifecycle.Change(target, paths.pohunek_state(), path)


def _apply(args, *, installing: bool) -> int:
    _agent(args, "install" if installing else "update")
    change = _change(args)
    require_policy_outside(change.state, change.target)

    def policy_over(policy_file: Path | None) -> Policy:
        """The policy to write: the flags over the installed one (update), read only then."""
        return settings.build(
            bounds={field: getattr(args, field) for field in BOUNDS},
            access_mode=args.access_mode,
            hosts=args.allow_host,
            confirm_wildcard=args.confirm_wildcard,
            operator_cli=args.operator_cli,
            endpoint=_endpoint(change),
            installed=None if installing or policy_file is None else settings.read_installed(policy_file),
        )

    if installing:
        policy_over(None)  # install judges its flags before its source
    chosen = source.resolve(change.state)
    version = hermes_bin.version(change.bin, chosen.runtime.probe, change.target.home)
    hermes_bin.sibling_python(change.bin)  # the probe's interpreter, judged before anything changes
    # Update inherits from the policy as it is once an interrupted change is finished.
    recovered = lifecycle.apply(change, chosen, policy_over, confirm_modified=getattr(args, "confirm_modified", False))
    report = status.report(change.target, change.state, change.bin, hermes=version, source=(chosen, None))
    data = {**report, "recovered": recovered}
    output.emit(args, data, _text)
    return 0


def _endpoint(change: lifecycle.Change) -> str:
    return os.environ.get(ENDPOINT_ENV) or paths.default_daemon_endpoint(change.state)


def cmd_install(args) -> int:
    return _apply(args, installing=True)


def cmd_update(args) -> int:
    return _apply(args, installing=False)


def _hermes(change: lifecycle.Change, chosen: source.Source | None) -> dict[str, Any]:
    from runtime_package.manifests import DEFAULT_PROBE

    probe = chosen.runtime.probe if chosen else DEFAULT_PROBE
    try:
        return hermes_bin.version(change.bin, probe, change.target.home)
    except hermes_bin.HermesUnusable as exc:
        return {"bin": change.bin, "version": (exc.detail or {}).get("version"), "accepted": False, "error": exc.code}


def cmd_status(args) -> int:
    _agent(args, "status")
    change = _change(args, judge_bin=False)
    found = status.source_or_error(change.state)
    data = status.report(change.target, change.state, change.bin, hermes=_hermes(change, found[0]), source=found)
    output.emit(args, data, _text)
    return 0


def cmd_uninstall(args) -> int:
    _agent(args, "uninstall")
    change = _change(args)
    removed, recovered = lifecycle.uninstall(change, confirm_modified=args.confirm_modified)
    data = {**status.report(change.target, change.state, change.bin), "removed": removed, "recovered": recovered}
    output.emit(args, data, _text)
    return 0


def cmd_doctor(args) -> int:
    from hermes_cli.commands import operator as hooks_doctor

    _agent(args, "doctor")
    findings = hooks_doctor.findings()
    mesh = hooks_doctor.mesh_checks(findings)
    if args.hermes_profile is None and args.hermes_home is None:
        checks = doctor.not_run(doctor.TARGET_CHECKS, doctor.NOT_SELECTED_HINT) + mesh
        ok = all(f["ok"] for f in findings)
        data: dict[str, Any] = {"ok": ok, "findings": findings, "checks": checks}
        output.emit(args, data, hooks_doctor.findings_text)
        return 0 if ok else 1
    change = _change(args, judge_bin=False)
    target_checks, extra = doctor.target_checks(change.target, change.state, change.bin)
    checks = target_checks + mesh
    ok = all(c["status"] != "fail" for c in checks)
    data = {"ok": ok, "target": change.target.to_dict(), "checks": checks, **extra, "findings": findings}
    output.emit(args, data, _doctor_text)
    return 0 if ok else 1


def _doctor_text(data: dict[str, Any]) -> str:
    rows = [
        (
            "FAIL" if c["status"] == "fail" else c["status"],
            c["code"],
            "" if c["status"] == "pass" else c["recovery_hint"],
        )
        for c in data["checks"]
    ]
    head = "ok" if data["ok"] else "problems found"
    return f"hermes operator doctor: {head}\n" + output.table(("", "CHECK", "RECOVERY"), rows)


def _text(data: dict[str, Any]) -> str:
    target = data["target"]
    lines = [f"target     {target['kind']} {target.get('profile') or target['hermes_home']}"]
    if not data["installed"]:
        lines.append("installed  no")
    else:
        lines.append(
            "installed  yes" + ("" if data["enabled"] else " (disabled)") + (" MODIFIED" if data["modified"] else "")
        )
        lines.append(f"outdated   {'yes' if data['outdated'] else 'no'}")
        provenance = data["provenance"] or {}
        lines.append(f"source     {provenance.get('source')} {provenance.get('package_digest', '')}".rstrip())
    if data["policy"]:
        policy = data["policy"]
        lines.append(f"access     {policy['access_mode']} hosts {','.join(policy['allowed_hosts'])}")
    if data["package_source_error"]:
        lines.append(f"package    {data['package_source_error']}")
    if data.get("hermes"):
        hermes = data["hermes"]
        lines.append(
            f"hermes     {hermes.get('version') or '?'}" + ("" if hermes.get("accepted") else " (not accepted)")
        )
    return "\n".join(lines)
