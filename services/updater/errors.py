"""The family of every update error, from the plan to the receipt."""

from __future__ import annotations

from shared.errors import HermesError


class UpdateError(HermesError, family=True):
    """An update: its plan, snapshot, apply, completion, rollback, receipt and lock."""
