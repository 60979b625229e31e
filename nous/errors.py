"""The family of every Nous account error: the store, the token, the portal, the guest handoff."""

from __future__ import annotations

from shared.errors import HermesError


class NousError(HermesError, family=True):
    """The Nous account: signing in, the account store, the portal, the guest handoff."""
