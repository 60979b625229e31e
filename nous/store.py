"""The Nous account store: one per install, shared by every profile.

``<root>/shared/nous_auth.json`` (mode 0600) holds the account's tokens; each profile's
``<home>/auth.json`` (0600) says which provider state that profile uses. Both are written
only through the two write seams below, each a locked read-modify-write (the store's lock is always
taken before a profile's), so whatever must
happen whenever an account is saved (the guest handoff's bookkeeping) has exactly two places
to live. Everything here blocks: async code calls it through ``trio.to_thread``.

``public_view`` is the only shape of an account that may leave this module for output:
it has no token in it.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nous.errors import NousError
from nous.guest_handoff.records import note_replacement, wake_parked
from nous.guest_handoff.rules import record_key
from shared import files
from shared.errors import HermesError
from shared.homes import DEFAULT_PROFILE
from shared.layout import NOUS_STORE_FILE, PROFILE_AUTH_FILE

PROVIDER = "nous"
STORE_VERSION = 1
# A refresh holds the lock across one bounded request (see ``nous.refresh``).
LOCK_TIMEOUT = 30.0
# The fields of an account that are not secret.
PUBLIC_FIELDS = (
    "sub",
    "email",
    "tier",
    "host",
    "portal",
    "expires_at",
    "saved_at",
    "refreshed_at",
    "needs_sign_in",
    "needs_sign_in_reason",
)
SECRET_FIELDS = ("access_token", "refresh_token")


class StoreError(NousError):
    code = "auth_store_failed"


class SaveAborted(NousError):
    """The persist guard said no (a cancel won): nothing was written."""

    code = "save_aborted"


def store_path(root: Path) -> Path:
    return Path(root) / NOUS_STORE_FILE


def profile_auth_path(home: Path) -> Path:
    return Path(home) / PROFILE_AUTH_FILE


def read_store(root: Path) -> dict[str, Any]:
    """The shared store as written (an empty one when there is none). ``StateFileCorrupt``
    for a file that is not a JSON map."""
    return _checked(files.read_json(store_path(root), default={}))


def read_account(root: Path) -> dict[str, Any] | None:
    account = read_store(root).get("account")
    return account if isinstance(account, dict) else None


def public_view(account: dict[str, Any] | None) -> dict[str, Any]:
    """What status output shows of an account: never a token."""
    if account is None:
        return {"signed_in": False}
    view = {key: account.get(key) for key in PUBLIC_FIELDS}
    view["signed_in"] = not account.get("needs_sign_in")
    return view


# --- the two write seams --------------------------------------------------------------------


def write_shared_nous_state(root: Path, change: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """Seam one: a locked read-modify-write of the shared Nous store. ``change`` gets a copy
    of the store and returns the new one; raising (``SaveAborted`` included) writes nothing."""
    path = store_path(root)
    _ensure_private_dir(path.parent)

    def apply(old: dict[str, Any]) -> dict[str, Any]:
        new = change(copy.deepcopy(_checked(old)))
        new["version"] = STORE_VERSION
        _hand_off_guest(root, DEFAULT_PROFILE, old.get("guest"), new, new.get("account"))
        return new

    written = files.update_json(path, apply, default={}, secret=True, timeout=LOCK_TIMEOUT)
    _wake_parked_handoffs(root, written.get("account"))
    return written


def store_provider_state(home: Path, provider: str, state: dict[str, Any] | None) -> None:
    """Seam two: a locked read-modify-write of one profile's provider state (``None`` forgets it)."""

    def apply(old: dict[str, Any]) -> dict[str, Any]:
        providers = old.get("providers")
        providers = dict(providers) if isinstance(providers, dict) else {}
        before = providers.get(provider)
        if state is None:
            providers.pop(provider, None)
        else:
            providers[provider] = state
        new = {**old, "providers": providers}
        root, profile = _root_and_profile(home)
        _hand_off_guest(root, profile, before, new, state)
        return new

    files.update_json(profile_auth_path(home), apply, default={}, secret=True, timeout=LOCK_TIMEOUT)


def _hand_off_guest(root: Path, profile: str, before: Any, new: dict[str, Any], account: Any) -> None:
    """When ``account`` replaces the guest identity ``before`` in the document ``new``: keep the
    guest's credential in ``new`` (for the claim, keyed by its hash) and note the handoff."""
    if not (isinstance(before, dict) and isinstance(before.get("anon"), str) and isinstance(account, dict)):
        return
    if not account.get("sub"):
        return
    anon = before["anon"]
    retired = dict(new.get("retired_guests") or {})
    retired[record_key(anon)] = anon
    new["retired_guests"] = retired
    if new.get("guest") == before:  # the guest identity this account replaced
        new.pop("guest", None)
    note_replacement(
        root, anon=anon, profile=profile, destination=account["sub"], email=str(account.get("email") or "")
    )


def _wake_parked_handoffs(root: Path, account: Any) -> None:
    """After a write of the shared store (the account on disk now): handoffs parked until this
    account is back are due again. The account is saved either way: a failure here leaves them
    parked, to expire at their window's end or wake at the next write."""
    usable = isinstance(account, dict) and not account.get("needs_sign_in")
    try:
        wake_parked(root, account.get("sub") if usable else None)
    except (HermesError, OSError):
        pass


def _root_and_profile(home: Path) -> tuple[Path, str]:
    home = Path(home)
    if home.parent.name == "profiles":
        return home.parent.parent, home.name
    return home, DEFAULT_PROFILE


# --- what the sign-in, logout and the free tier write -------------------------------------------


def account_record(
    *,
    sub: str,
    email: str,
    tier: str,
    host: str,
    access_token: str,
    refresh_token: str,
    expires_in: float,
    portal: str,
    ca_bundle: str | None,
) -> dict[str, Any]:
    now = time.time()
    return {
        "sub": sub,
        "email": email,
        "tier": tier,
        "host": host,
        "portal": portal,
        "ca_bundle": ca_bundle,
        "access_token": access_token,
        "refresh_token": refresh_token,
        "expires_at": now + expires_in,
        "saved_at": now,
        "refreshed_at": now,
        "needs_sign_in": False,
        "needs_sign_in_reason": None,
    }


def save_account(root: Path, home: Path, account: dict[str, Any], guard: Callable[[], bool] | None = None) -> None:
    """Save a signed-in account for the install and point the profile at it, as one step
    under the store's lock: ``guard`` runs first (``False`` aborts with nothing written), then
    the profile's pointer, then the account. A failure before the account is written leaves
    the install as it was (a pointer alone names an account status does not show)."""

    def change(store: dict[str, Any]) -> dict[str, Any]:
        if guard is not None and not guard():
            raise SaveAborted("the sign-in was cancelled before the save")
        pointer = {"source": "shared", "sub": account["sub"], "email": account["email"], "selected_at": time.time()}
        store_provider_state(home, PROVIDER, pointer)
        store["account"] = account
        return store

    write_shared_nous_state(root, change)


def forget_account(root: Path, home: Path) -> dict[str, Any] | None:
    """Log out: the install's account is removed, and the profile no longer points at it.
    The account that was removed (or ``None``)."""
    removed: list[dict[str, Any] | None] = [None]

    def change(store: dict[str, Any]) -> dict[str, Any]:
        store_provider_state(home, PROVIDER, None)
        removed[0] = store.pop("account", None)
        return store

    write_shared_nous_state(root, change)
    return removed[0]


def save_guest(root: Path, anon: str, guest_id: str) -> bool:
    """Record the install's free-tier identity; False (nothing written) when the install
    already has an account or a guest identity."""
    saved = [False]

    def change(store: dict[str, Any]) -> dict[str, Any]:
        if store.get("account") is None and store.get("guest") is None:
            store["guest"] = {"anon": anon, "id": guest_id, "saved_at": time.time()}
            saved[0] = True
        return store

    write_shared_nous_state(root, change)
    return saved[0]


def guest_credential(root: Path, home: Path, key: str) -> str | None:
    """The retired guest credential whose hash is ``key``: the profile's own first, then the install's."""
    for document in (files.read_json(profile_auth_path(home), default={}), read_store(root)):
        retired = document.get("retired_guests") if isinstance(document, dict) else None
        if isinstance(retired, dict) and isinstance(retired.get(key), str):
            return retired[key]
    return None


def _checked(store: Any) -> dict[str, Any]:
    if not isinstance(store, dict):
        raise StoreError("the Nous account store is not a JSON map")
    account = store.get("account")
    if account is not None and not (
        isinstance(account, dict) and all(isinstance(account.get(k), str) for k in SECRET_FIELDS)
    ):
        raise StoreError("the Nous account store holds an account without its tokens")
    return store


def _ensure_private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if os.stat(path).st_mode & 0o077:
        os.chmod(path, 0o700)
