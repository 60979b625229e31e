"""``hermes plugins install|update|remove|list|enable|disable``: the profile's Hermes plugins,
and which may load, as the Hermes Agent's own ``plugins`` command does them.

``list --json`` prints one JSON array of records (``name``, ``key``, ``status``: ``enabled``,
``disabled`` or ``not enabled``, ``source``: ``user`` or ``git``, ``version``, ``description``,
``kind``, ``error``); ``list`` imports no plugin. ``enable`` and ``disable`` edit only the
``plugins`` lists of the profile's ``config.yaml`` (and, with ``--allow-tool-override`` or
``--no-allow-tool-override``, ``plugins.entries.<key>.allow_tool_override``) and say what they
did in Hermes' words; their hidden ``--json`` prints one document instead.
"""

from __future__ import annotations

import json
from typing import Any

from hermes_cli import output, plugin_git, plugin_host
from shared import homes

NEXT_SESSION = "Takes effect on next session."


def _record(p: plugin_host.PluginInfo) -> dict[str, Any]:
    return {
        "name": p.name,
        "key": p.key,
        "status": p.status,
        "version": p.version,
        "description": p.description,
        "source": p.source,
        "kind": p.kind,
        "error": p.error,
    }


def cmd_list(args) -> int:
    found = plugin_host.discover(homes.active_home())
    if args.enabled:
        found = [p for p in found if p.status == plugin_host.ENABLED]
    # --user and --no-bundled keep what is not bundled: every plugin here is the user's.
    rows = [_record(p) for p in found]
    if args.json:
        print(json.dumps(rows, indent=2))
    elif args.plain:
        for r in rows:
            print(f"{r['status']:12} {r['source']:8} {r['version']:8} {r['name']}")
    else:
        print(_list_text(rows))
    return 0


def _list_text(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "No plugins installed (<home>/plugins/<name>/ or <home>/plugins/<category>/<name>/)."
    table = [(r["key"], r["status"], r["version"] or "-", r["source"], r["error"] or r["description"]) for r in rows]
    return output.table(("PLUGIN", "STATUS", "VERSION", "SOURCE", "DESCRIPTION"), table)


def cmd_enable(args) -> int:
    home = homes.active_home()
    info = plugin_host.find(home, args.name)
    changed = plugin_host.set_enabled(home, info.key, True)
    grant = args.allow_tool_override
    if grant is not None:
        plugin_host.set_tool_override(home, info.key, grant)
    data = {"name": info.name, "key": info.key, "enabled": True, "changed": changed, "allow_tool_override": grant}
    output.emit(args, data, _enable_text)
    return 0


def _enable_text(d: dict[str, Any]) -> str:
    key = d["key"]
    said = f"Plugin {key} enabled. {NEXT_SESSION}" if d["changed"] else f"Plugin '{key}' is already enabled."
    if d["allow_tool_override"] is True:
        said += f"\nGranted {key} permission to override tools (plugins.entries.{key}.allow_tool_override: true)."
    elif d["allow_tool_override"] is False:
        said += (
            f"\n{key} may not override tools. Re-run `hermes plugins enable {key} --allow-tool-override` to grant it."
        )
    return said


def cmd_disable(args) -> int:
    home = homes.active_home()
    info = plugin_host.find(home, args.name)
    changed = plugin_host.set_enabled(home, info.key, False)
    data = {"name": info.name, "key": info.key, "enabled": False, "changed": changed}
    output.emit(
        args,
        data,
        lambda d: (
            f"Plugin {d['key']} disabled. {NEXT_SESSION}"
            if d["changed"]
            else f"Plugin '{d['key']}' is already disabled."
        ),
    )
    return 0


def cmd_install(args) -> int:
    home = homes.active_home()
    info = plugin_git.install(home, args.identifier, force=args.force)
    if args.enable:
        plugin_host.set_enabled(home, info.key, True)
    data = {**_record(info), "enabled": bool(args.enable)}
    output.emit(args, data, _install_text)
    return 0


def _install_text(d: dict[str, Any]) -> str:
    said = f"Plugin {d['key']} installed."
    if d["enabled"]:
        return f"{said}\nPlugin {d['key']} enabled. {NEXT_SESSION}"
    return f"{said}\nPlugin installed but not enabled. Run `hermes plugins enable {d['key']}` to activate."


def cmd_update(args) -> int:
    data = plugin_git.update(homes.active_home(), args.name)
    output.emit(args, data, lambda d: f"Plugin {d['key']} updated (at {d['commit'][:12]}). {NEXT_SESSION}")
    return 0


def cmd_remove(args) -> int:
    home = homes.active_home()
    info = plugin_git.remove(home, args.name)
    data = {"name": info.name, "key": info.key, "removed": True}
    output.emit(args, data, lambda d: f"Plugin {d['key']} removed from {home / plugin_host.PLUGINS_DIR}.")
    return 0
