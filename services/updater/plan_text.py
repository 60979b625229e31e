"""The text of ``hermes update --plan``."""

from __future__ import annotations

from typing import Any

from services.updater.plan import Plan, short


def render_plan(plan: Plan) -> str:
    """The text of ``hermes update --plan``."""
    kind = "Rollback" if plan.rollback else "Update"
    lines = [f"{kind} plan (read-only: nothing was changed)", ""]
    how = "updated in place" if plan.install.in_place else "not updated in place"
    lines.append(f"  install   {plan.install.kind} at {plan.install_root} ({how})")
    lines.append(f"  code      {plan.code_version} @ {short(plan.code_sha)}")
    if plan.rollback is not None and plan.git is not None:
        lines.extend(_rollback_lines(plan.git, plan.rollback))
    elif plan.git is not None:
        lines.extend(_target_lines(plan.git))
    elif plan.git_error is not None:
        lines.append(f"  target    unknown: {plan.git_error['message']}")
    lines.append(f"  profiles  {len(plan.profiles)}")
    lines.extend(f"    {p['name']:<16} {p['home']}" for p in plan.profiles)
    lines.append(f"  gateways  {len(plan.gateways)} live")
    for g in plan.gateways:
        version = f"{g.code_version or '?'} @ {short(g.code_sha)}"
        lines.append(f"    {g.profile:<16} pid {g.pid:<8} {g.state:<9} {g.supervisor:<12} {version}  ({g.source})")
    if plan.foreign:
        lines.append(f"  foreign   {len(plan.foreign)} of other homes (never drained or restarted)")
        lines.extend(f"    {f['kind']:<9} {f['name']:<24} {f['home']}" for f in plan.foreign)
    lines.append("")
    lines.append("Would:" if not plan.refused else "Refused:")
    lines.extend(f"  {i}. {action}" for i, action in enumerate(plan.actions, 1))
    return "\n".join(lines) + "\n"


def _rollback_lines(target: dict[str, Any], rollback: dict[str, Any]) -> list[str]:
    status = "there already" if target["up_to_date"] else f"from {short(target['head'])}"
    backup = rollback["backup"]
    tree = f"{target['dirty_count']} modified tracked file(s)" if target["dirty"] else "clean"
    return [
        f"  target    {short(rollback['target'])}, where update {rollback['of']} started: {status}",
        f"  backup    {backup['path'] if backup else 'none: the home is not restored'}",
        f"  tree      {tree}",
    ]


def _target_lines(target: dict[str, Any]) -> list[str]:
    where = f"origin/{target['branch']} @ {short(target['remote_sha'])}"
    if target["up_to_date"]:
        status = "up to date"
    elif target["behind"] is not None:
        status = f"{target['behind']} behind, {target['ahead']} ahead"
    else:
        status = "differs (ahead/behind unknown without a fetch)"
    tree = f"{target['dirty_count']} modified tracked file(s)" if target["dirty"] else "clean"
    return [
        f"  target    {where}: {status}  [{target['origin_url']}]",
        f"  tree      {tree}, {target['untracked_count']} untracked file(s)",
    ]
