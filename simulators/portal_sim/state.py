"""The simulator's state and every change to it, behind one lock.

Device codes, scheduled faults, the request log and the config live in memory only. The
durable part (signing key, accounts, refresh-token families, guest identities) is saved to
the ``--state`` file after every change, so a restarted simulator keeps its accounts and
still accepts the tokens it issued.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shared.files import StateFileCorrupt, read_json, write_json_atomic
from simulators.portal_sim import tokens
from simulators.portal_sim.config import Config
from simulators.portal_sim.errors import ApiError, invalid_token
from simulators.portal_sim.faults import Fault

REQUEST_LOG_CAP = 10_000
USER_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"  # RFC 8628 6.1: no vowels, nothing that looks alike
EXPIRED_CODE_KEEP = 600.0  # seconds an expired device code still answers expired_token
STATE_VERSION = 1


def _digest(secret: str) -> str:
    # Only digests of refresh and guest tokens are kept, so the state file holds no usable token.
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass
class Account:
    id: str
    email: str
    tier: str
    host: str | None  # None: the simulator's own <base>/v1, whatever port it has now
    connectors: list[str] = field(default_factory=list)


@dataclass
class Family:
    """The refresh tokens descending from one device-code grant."""

    id: str
    account: str
    scope: str
    status: str = "active"  # or "revoked"
    current: str | None = None  # digest of the one refresh token that may still be used
    used: list[str] = field(default_factory=list)  # digests of rotated-out refresh tokens


@dataclass
class Guest:
    id: str
    token: str  # digest of the anon_ token
    connectors: list[str] = field(default_factory=list)
    retired: bool = False


@dataclass
class DeviceCode:
    device_code: str
    user_code: str
    client_id: str
    scope: str
    expires_at: float  # time.monotonic()
    interval: float  # grows with every slow_down
    last_poll: float | None = None
    status: str = "pending"  # approved, denied, exchanged
    account: str | None = None


def _oauth_error(error: str, description: str = "") -> ApiError:
    return ApiError(400, error, description)


class State:
    def __init__(self, base: str, path: Path | None = None):
        self.base = base
        self.path = path
        self.lock = threading.Lock()
        self.config = Config()
        self.key = secrets.token_bytes(32)
        self._clear()
        if path is not None:
            self._load()

    # --- durability -----------------------------------------------------------------------------

    def _clear(self) -> None:
        self.accounts: dict[str, Account] = {}
        self.families: dict[str, Family] = {}
        self.guests: dict[str, Guest] = {}
        self._emails: dict[str, str] = {}  # email -> account id
        self._refresh: dict[str, str] = {}  # refresh token digest -> family id
        self._guest_tokens: dict[str, str] = {}  # anon token digest -> guest id
        self._device_codes: dict[str, DeviceCode] = {}
        self._user_codes: dict[str, str] = {}  # user code -> device code
        self._faults: dict[tuple[str, str], deque[Fault]] = {}
        self._requests: deque[dict[str, Any]] = deque(maxlen=REQUEST_LOG_CAP)

    def _load(self) -> None:
        assert self.path is not None
        data = read_json(self.path, default=None)
        if data is None:
            self._save()  # the signing key is durable from the first start on
            return
        try:
            if data["version"] != STATE_VERSION:
                raise ValueError(f"version {data['version']!r}")
            self.key = bytes.fromhex(data["key"])
            for item in data["accounts"]:
                account = Account(**item)
                self.accounts[account.id] = account
                self._emails[account.email] = account.id
            for item in data["families"]:
                family = Family(**item)
                self.families[family.id] = family
                for digest in [*family.used, *filter(None, [family.current])]:
                    self._refresh[digest] = family.id
            for item in data["guests"]:
                guest = Guest(**item)
                self.guests[guest.id] = guest
                self._guest_tokens[guest.token] = guest.id
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StateFileCorrupt(self.path, f"unexpected content ({type(exc).__name__}: {exc})") from None

    def _save(self) -> None:
        if self.path is None:
            return
        data = {
            "version": STATE_VERSION,
            "key": self.key.hex(),
            "accounts": [asdict(account) for account in self.accounts.values()],
            "families": [asdict(family) for family in self.families.values()],
            "guests": [asdict(guest) for guest in self.guests.values()],
        }
        write_json_atomic(self.path, data, secret=True)

    def reset(self) -> None:
        """Forget everything except the signing key and the config."""
        with self.lock:
            self._clear()
            self._save()

    # --- config ---------------------------------------------------------------------------------

    def update_config(self, changes: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.config.update(changes)
            return self.config.to_json()

    def recommended(self, tier: str) -> str:
        with self.lock:
            return self.config.recommended[tier]

    def _check_client(self, client_id: str) -> None:
        if client_id not in self.config.clients:
            raise _oauth_error("invalid_client", "unknown client_id")

    # --- device flow (RFC 8628) ----------------------------------------------------------------

    def issue_device_code(self, client_id: str, scope: str) -> dict[str, Any]:
        with self.lock:
            self._check_client(client_id)
            now = time.monotonic()
            self._prune_device_codes(now)
            user_code = self._new_user_code()
            code = DeviceCode(
                device_code=secrets.token_urlsafe(32),
                user_code=user_code,
                client_id=client_id,
                scope=scope,
                expires_at=now + self.config.device_ttl,
                interval=self.config.interval,
            )
            self._device_codes[code.device_code] = code
            self._user_codes[user_code] = code.device_code
            return {
                "device_code": code.device_code,
                "user_code": user_code,
                "verification_uri": f"{self.base}/device",
                "verification_uri_complete": f"{self.base}/device?user_code={user_code}",
                "expires_in": self.config.device_ttl,
                "interval": self.config.interval,
            }

    def _prune_device_codes(self, now: float) -> None:
        # Bounded memory: a code long past its expiry is forgotten (it then answers invalid_grant).
        stale = [code for code in self._device_codes.values() if now > code.expires_at + EXPIRED_CODE_KEEP]
        for code in stale:
            del self._device_codes[code.device_code]
            del self._user_codes[code.user_code]

    def _new_user_code(self) -> str:
        while True:
            letters = "".join(secrets.choice(USER_CODE_ALPHABET) for _ in range(8))
            user_code = f"{letters[:4]}-{letters[4:]}"
            if user_code not in self._user_codes:
                return user_code

    def _pending_code(self, user_code: str) -> DeviceCode:
        # People type user codes: case, spaces and the dash do not matter (RFC 8628 6.1).
        letters = "".join(user_code.split()).replace("-", "").upper()
        device_code = self._user_codes.get(f"{letters[:4]}-{letters[4:]}")
        if device_code is None:
            raise ApiError(404, "unknown_user_code", "no device code has this user code")
        code = self._device_codes[device_code]
        if time.monotonic() >= code.expires_at:
            raise ApiError(409, "expired_token", "the device code has expired")
        if code.status != "pending":
            raise ApiError(409, "not_pending", f"the device code is already {code.status}")
        return code

    def approve(self, user_code: str, email: str, tier: str | None, host: str | None) -> str:
        with self.lock:
            code = self._pending_code(user_code)
            account = self._account_for(email, tier, host)
            code.status, code.account = "approved", account.id
            self._save()
            return account.id

    def deny(self, user_code: str) -> None:
        with self.lock:
            self._pending_code(user_code).status = "denied"

    def _account_for(self, email: str, tier: str | None, host: str | None) -> Account:
        """The account of ``email``, created if new; a given tier or host replaces the old one."""
        account_id = self._emails.get(email)
        if account_id is None:
            account = Account(id=f"acct_{secrets.token_hex(8)}", email=email, tier=tier or "free", host=host)
            self.accounts[account.id] = account
            self._emails[email] = account.id
            return account
        account = self.accounts[account_id]
        account.tier = tier or account.tier
        account.host = host or account.host
        return account

    def poll(self, device_code: str, client_id: str) -> dict[str, Any]:
        with self.lock:
            self._check_client(client_id)
            code = self._device_codes.get(device_code)
            if code is None or code.status == "exchanged":
                raise _oauth_error("invalid_grant", "unknown or already used device code")
            if code.client_id != client_id:
                raise _oauth_error("invalid_client", "the device code was issued to another client")
            now = time.monotonic()
            if now >= code.expires_at:
                raise _oauth_error("expired_token", "the device code has expired")
            if code.status == "denied":
                raise _oauth_error("access_denied", "the user denied the request")
            too_soon = code.last_poll is not None and now - code.last_poll < code.interval
            code.last_poll = now
            if too_soon:
                code.interval += self.config.slow_down_step
                raise _oauth_error("slow_down", "polled sooner than the interval")
            if code.status == "pending":
                raise _oauth_error("authorization_pending", "the user has not answered yet")
            code.status = "exchanged"
            account = self.accounts[code.account or ""]  # an approved code always names its account
            family = Family(id=f"fam_{secrets.token_hex(8)}", account=account.id, scope=code.scope)
            self.families[family.id] = family
            answer = self._issue(account, family)
            self._save()
            return answer

    # --- tokens --------------------------------------------------------------------------------

    def _issue(self, account: Account, family: Family) -> dict[str, Any]:
        """A new access token and the family's next refresh token (the previous one becomes used)."""
        refresh_token = secrets.token_urlsafe(32)
        if family.current is not None:
            family.used.append(family.current)
        family.current = _digest(refresh_token)
        self._refresh[family.current] = family.id
        ttl = self.config.access_ttl
        now = time.time()
        iat = int(now)
        claims = {
            "sub": account.id,
            "email": account.email,
            "tier": account.tier,
            "host": self._host(account),
            "iat": iat,
            "exp": iat + ttl if isinstance(ttl, int) else now + ttl,
            "iss": self.base,
            "fam": family.id,
            "jti": secrets.token_hex(16),
        }
        return {
            "access_token": tokens.sign(claims, self.key),
            "token_type": "Bearer",
            "expires_in": ttl,
            "refresh_token": refresh_token,
            "scope": family.scope,
        }

    def _host(self, account: Account) -> str:
        return account.host or f"{self.base}/v1"

    def refresh(self, refresh_token: str, client_id: str) -> dict[str, Any]:
        with self.lock:
            self._check_client(client_id)
            digest = _digest(refresh_token)
            family = self.families.get(self._refresh.get(digest, ""))
            if family is None or family.status != "active":
                raise _oauth_error("invalid_grant", "unknown or revoked refresh token")
            if digest != family.current:
                # A rotated-out token came back: someone holds a copy. RFC 9700 4.14.2: end the family.
                family.status = "revoked"
                self._save()
                raise _oauth_error("refresh_token_reused", "refresh token reused; its family is revoked")
            answer = self._issue(self.accounts[family.account], family)
            self._save()
            return answer

    def authenticate(self, access_token: str) -> dict[str, Any]:
        """The claims of a valid access token whose family is still active; else 401."""
        with self.lock:
            try:
                claims = tokens.verify(access_token, self.key)
            except tokens.InvalidToken:
                raise invalid_token() from None
            fam = claims.get("fam")
            family = self.families.get(fam) if isinstance(fam, str) else None
            if family is None or family.status != "active" or family.account != claims.get("sub"):
                raise invalid_token()
            return claims

    # --- accounts ------------------------------------------------------------------------------

    def accounts_view(self) -> list[dict[str, Any]]:
        with self.lock:
            return [
                {
                    "id": account.id,
                    "email": account.email,
                    "tier": account.tier,
                    "host": self._host(account),
                    "connectors": list(account.connectors),
                    "families": {f.id: f.status for f in self.families.values() if f.account == account.id},
                }
                for account in self.accounts.values()
            ]

    def revoke_account(self, email: str) -> dict[str, Any]:
        with self.lock:
            account_id = self._emails.get(email)
            if account_id is None:
                raise ApiError(404, "unknown_account", "no account has this email")
            revoked = [f.id for f in self.families.values() if f.account == account_id and f.status == "active"]
            for fam in revoked:
                self.families[fam].status = "revoked"
            self._save()
            return {"account": account_id, "revoked": revoked}

    # --- guest identities ------------------------------------------------------------------------

    def register_guest(self) -> dict[str, Any]:
        with self.lock:
            token = f"anon_{secrets.token_urlsafe(32)}"
            guest = Guest(id=f"guest_{secrets.token_hex(8)}", token=_digest(token))
            self.guests[guest.id] = guest
            self._guest_tokens[guest.token] = guest.id
            self._save()
            return {"token": token, "id": guest.id, "tier": "free"}

    def _guest(self, token: str) -> Guest | None:
        return self.guests.get(self._guest_tokens.get(_digest(token), ""))

    def guest_view(self, token: str) -> dict[str, Any]:
        with self.lock:
            guest = self._guest(token)
            if guest is None:
                raise invalid_token()
            return {"id": guest.id, "connectors": list(guest.connectors), "retired": guest.retired}

    def claim(self, account_id: str, token: str) -> dict[str, Any]:
        """Move a guest's connectors onto the account and retire the guest."""
        with self.lock:
            guest = self._guest(token)
            if guest is None:
                raise ApiError(410, "unknown_token", "no guest identity has this token")
            if guest.retired:
                raise ApiError(410, "already_retired", "this guest identity was claimed before")
            account = self.accounts[account_id]
            moved, guest.connectors, guest.retired = guest.connectors, [], True
            account.connectors.extend(name for name in moved if name not in account.connectors)
            self._save()
            return {"status": "claimed", "connectors": moved, "cohort_carried": bool(moved)}

    def connect(self, token: str, app: str) -> dict[str, Any]:
        with self.lock:
            guest = self._guest(token)
            if guest is None:
                raise ApiError(404, "unknown_token", "no guest identity has this token")
            if guest.retired:
                raise ApiError(409, "already_retired", "this guest identity was claimed")
            if app not in guest.connectors:
                guest.connectors.append(app)
                self._save()
            return {"id": guest.id, "connectors": list(guest.connectors)}

    # --- faults and the request log -----------------------------------------------------------

    def add_faults(self, method: str, path: str, count: int, fault: Fault) -> int:
        with self.lock:
            queue = self._faults.setdefault((method, path), deque())
            queue.extend([fault] * count)
            return len(queue)

    def clear_faults(self) -> None:
        with self.lock:
            self._faults.clear()

    def take_fault(self, method: str, path: str) -> Fault | None:
        with self.lock:
            queue = self._faults.get((method, path))
            return queue.popleft() if queue else None

    def record(self, entry: dict[str, Any]) -> None:
        with self.lock:
            self._requests.append(entry)

    def requests(self, path: str | None) -> list[dict[str, Any]]:
        with self.lock:
            return [entry for entry in self._requests if path is None or entry["path"] == path]
