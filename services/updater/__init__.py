"""The updater: ``plan → snapshot → apply → restart-per-kind → verify → report``.

The process that starts an update runs the old code: it holds the lock, writes the receipt,
plans, snapshots and applies. Once the tree has moved (the commit point) the rest runs in a
freshly spawned interpreter of the NEW code, which answers with a result correlated to this
update's id and nonce. The old interpreter never imports a module of the new tree.

This module is the updater's public face: what the ``hermes`` CLI may use. Every command
checks for owed restarts through it, so only the obligations (one small file read) are
imported with it; every other name is imported from its module when it is first used.
"""

from __future__ import annotations

from services.updater.obligations import (
    clear_gateway,
    confirm_owed,
    owed_counts,
    read_completion,
    read_fleet,
    read_stash,
    rename_gateway,
    restart_warning,
)

TYPE_CHECKING = False  # typing's own flag without importing typing; mypy reads it as true
if TYPE_CHECKING:
    from typing import Any

    from services.updater import ops
    from services.updater.confirm import confirm_update, owed_confirm, pending_line
    from services.updater.confirm_timer import settle_confirm
    from services.updater.errors import UpdateError
    from services.updater.lock import UpdateInProgress, holder, lock_path
    from services.updater.plan import availability, plan_update, update_options
    from services.updater.plan_text import render_plan
    from services.updater.receipt import Receipt
    from services.updater.receipt_store import ReceiptStore
    from services.updater.settings import load_settings
    from services.updater.snapshot_restore import list_snapshots, restore_snapshot
    from services.updater.update_id import new_update_id
    from services.updater.verify import verdict

__all__ = [
    "Receipt",
    "ReceiptStore",
    "UpdateError",
    "UpdateInProgress",
    "availability",
    "clear_gateway",
    "confirm_owed",
    "confirm_update",
    "holder",
    "list_snapshots",
    "load_settings",
    "lock_path",
    "new_update_id",
    "ops",
    "owed_confirm",
    "owed_counts",
    "pending_line",
    "plan_update",
    "read_completion",
    "read_fleet",
    "read_stash",
    "rename_gateway",
    "render_plan",
    "restart_warning",
    "restore_snapshot",
    "settle_confirm",
    "update_options",
    "verdict",
]

# The names imported on first use, and the module each comes from; ``ops`` (the control
# protocol) is that module itself.
_ON_FIRST_USE = {
    "Receipt": "services.updater.receipt",
    "ReceiptStore": "services.updater.receipt_store",
    "UpdateError": "services.updater.errors",
    "UpdateInProgress": "services.updater.lock",
    "confirm_update": "services.updater.confirm",
    "pending_line": "services.updater.confirm",
    "owed_confirm": "services.updater.confirm",
    "settle_confirm": "services.updater.confirm_timer",
    "availability": "services.updater.plan",
    "holder": "services.updater.lock",
    "list_snapshots": "services.updater.snapshot_restore",
    "load_settings": "services.updater.settings",
    "lock_path": "services.updater.lock",
    "new_update_id": "services.updater.update_id",
    "ops": "services.updater.ops",
    "plan_update": "services.updater.plan",
    "render_plan": "services.updater.plan_text",
    "restore_snapshot": "services.updater.snapshot_restore",
    "update_options": "services.updater.plan",
    "verdict": "services.updater.verify",
}


def __getattr__(name: str) -> Any:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    imported = importlib.import_module(module)
    value = imported if module == f"{__name__}.{name}" else getattr(imported, name)
    globals()[name] = value  # found directly from now on
    return value
