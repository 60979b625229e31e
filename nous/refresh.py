"""The token refresh: a new access token before the old one expires, never losing a rotation.

Refresh tokens are single-use: the portal rotates them and treats a second use as theft,
revoking the whole family. So a refresh reads the account, spends its refresh token and
stores the successor inside one hold of the store's lock; a second refresher (another
process, another task) waits, reads the fresh account and finds nothing to do.

A refresh the portal refuses for good (``refresh_rules`` says which) marks the account as
needing a sign-in; nothing raises into the caller, and the account's identity stays so
status can say whose sign-in lapsed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from nous import portal, store
from nous.access_token import InvalidAccessToken, read_claims
from nous.portal_errors import PortalError
from nous.refresh_rules import RefreshOutcome, after_failure, without_refresh
from shared.errors import HermesError


def refresh_account(root: Path, *, force: bool = False, now: float | None = None) -> RefreshOutcome:
    """Refresh the install's account if it is due (or ``force``). Blocks, holding the store's
    lock across the request; call it from a worker thread. Never raises."""
    outcome: list[RefreshOutcome] = []

    def change(state: dict[str, Any]) -> dict[str, Any]:
        outcome.append(_refresh_locked(state, force, time.time() if now is None else now))
        return state

    try:
        store.write_shared_nous_state(root, change)
    except (HermesError, OSError) as exc:
        return RefreshOutcome("failed", reason=getattr(exc, "code", "store_unreadable"))  # a code, never a class
    return outcome[0]


def _refresh_locked(state: dict[str, Any], force: bool, now: float) -> RefreshOutcome:
    """Runs under the store's lock, with ``state`` the store as read there: updates it in place."""
    account = state.get("account")
    if account is None:
        return RefreshOutcome("signed_out")
    skipped = without_refresh(account, force=force, now=now)
    if skipped is not None:
        return skipped
    try:
        tls = portal.tls_context(account.get("ca_bundle"))
        tokens = portal.refresh_blocking(account["portal"], tls, account["refresh_token"])
        claims = read_claims(tokens.access_token)
    except (PortalError, InvalidAccessToken) as exc:
        outcome = after_failure(exc)
        if outcome.result == "needs_sign_in":
            account.update(needs_sign_in=True, needs_sign_in_reason=outcome.reason)
        return outcome
    if claims.sub != account.get("sub"):
        # A token for someone else is not this account's; keep the old one and say so.
        return RefreshOutcome("failed", reason="account_mismatch")
    account.update(
        access_token=tokens.access_token,
        refresh_token=tokens.refresh_token,
        expires_at=now + tokens.expires_in,
        refreshed_at=now,
        email=claims.email,
        tier=claims.tier,
        host=claims.host,
    )
    return RefreshOutcome("refreshed", expires_at=account["expires_at"])
