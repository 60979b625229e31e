"""``hermes snapshot list [PROFILE]`` and ``hermes snapshot restore PROFILE [--update ID]``:
the quick snapshots every update takes of every profile, and file-loss recovery from them."""

from __future__ import annotations

from typing import Any

from hermes_cli import output
from shared import homes


def cmd_list(args) -> int:
    from services.updater import list_snapshots

    root = homes.root_home()
    data = {"root": str(root), "snapshots": list_snapshots(root, args.name)}
    output.emit(args, data, _list_text)
    return 0


def _list_text(d: dict[str, Any]) -> str:
    if not d["snapshots"]:
        return "no snapshot is kept"
    rows = [
        (s["profile"], s["update_id"] or "-", s["created_at"] or "-", s["files"], "yes" if s["complete"] else "no")
        for s in d["snapshots"]
    ]
    text = output.table(("PROFILE", "UPDATE", "TAKEN", "FILES", "USABLE"), rows)
    return text + "".join(f"\nunusable: {s['path']}: {s['problem']}" for s in d["snapshots"] if s["problem"])


def cmd_restore(args) -> int:
    from services.updater import restore_snapshot

    done = restore_snapshot(homes.root_home(), args.name, args.update)
    output.emit(args, done, _restore_text)
    return 0


def _restore_text(d: dict[str, Any]) -> str:
    lines = [f"restored {len(d['restored'])} file(s) of profile {d['profile']} from {d['snapshot']}"]
    lines += [f"  restored   {path}" for path in d["restored"]]
    lines += [f"  unchanged  {path}" for path in d["unchanged"]]
    if d["not_in_snapshot"]:
        lines.append(f"  kept as they are (not in the snapshot): {', '.join(d['not_in_snapshot'])}")
    return "\n".join(lines)
