"""Whether a live CURVE connection's client key is still authorized: the ZAP User-Id that
names the key a connection was let in with, the install's authorized keys (with the names they
are authorized under and those names' grants) as a cached set, and the judgement of each
request. Who the key is, once it is let through, and what it may call is
``shared.transport.principals``'s rule.

The ZAP handler (``shared.transport.zap``) judges a key at the handshake only; libzmq then
attaches the User-Id it answered to every message of that connection. A CURVE service holds
it, request by request, against the keys authorized now, so a revoked key's next request is
refused with ``auth_revoked``. The key decides, not its name: a name authorized again with
another key does not let the old key's connections back in.

The set is read from ``authorized/`` again only when a ``stat`` of the directory, made at
most every ``REFRESH`` seconds, differs from the one it was read under: every change there
adds, removes or renames an entry (key files are written atomically), which moves the
directory's mtime (its mode and owner are in the stat too: a directory made unsafe refuses
every key, as ZAP does). A read made while that mtime was younger than ``SETTLE`` seconds is
not trusted: a second change within the same clock tick would leave the mtime as it was. A
key missing from the set is looked for again at once before it is refused: ZAP, which let its
connection in, read the directory later than the set may have been.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from shared.protocol import Code, RemoteError
from shared.transport import curve_keys, principals

log = logging.getLogger(__name__)

# How often the directory is looked at: a revoke is seen within this, far inside a second.
REFRESH = 0.25
# How old the directory's mtime must be for a read made under it to be trusted.
SETTLE = 2.0
# Where a User-Id's key ends and the space before its name is.
_KEY_END = curve_keys.KEY_LENGTH


def user_id(name: str, key: bytes) -> bytes:
    """The ZAP User-Id of a connection let in with public ``key`` (Z85), authorized as ``name``:
    the key, which decides, then the name, for the log (never printed: only the name is)."""
    return key + b" " + name.encode()


def _split(user: str) -> tuple[str, str]:
    """(key, name) of a User-Id made by ``user_id``; ("", "") for anything else."""
    if len(user) <= _KEY_END + 1 or user[_KEY_END] != " ":
        return "", ""
    return user[:_KEY_END], user[_KEY_END + 1 :]


def name_of(user: str) -> str:
    """The key name a User-Id carries, for the log; "" when it carries none."""
    return _split(user)[1]


def judge(user: str, keys: frozenset[str]) -> RemoteError | None:
    """None when the connection with ZAP User-Id ``user`` may be served, its key being among
    ``keys`` (the ones authorized now); else the typed refusal. A User-Id that is missing or
    not of ``user_id``'s making is refused."""
    if user[_KEY_END : _KEY_END + 1] == " " and user[:_KEY_END] in keys:
        return None
    return RemoteError(Code.AUTH_REVOKED, "this client's CURVE key is no longer authorized by the service")


class AuthorizedKeys:
    """The public keys authorized in install ``root`` now, cached (see the module's rule).
    ``clock`` is monotonic, for the refresh; ``wall`` is the clock mtimes are in, nanoseconds."""

    def __init__(
        self, root: Path, *, clock: Callable[[], float] = time.monotonic, wall: Callable[[], int] = time.time_ns
    ):
        self._root = Path(root)
        self._directory = curve_keys.store(root) / "authorized"
        self._clock, self._wall = clock, wall
        self._keys: frozenset[str] = frozenset()
        self._names: dict[str, list[str]] = {}  # key -> the names it is authorized under
        self._grants: dict[str, frozenset[str]] = {}  # name -> its grants
        self._seen: tuple[int, ...] | None = None  # the stat the set was read under, once trusted
        self._next = float("-inf")

    def current(self, *, fresh: bool = False) -> frozenset[str]:
        """The keys authorized now; at most ``REFRESH`` seconds behind the directory, or not
        behind it at all when ``fresh`` (for a key missing from the set: ZAP read the directory
        at its handshake, which may be newer than the set)."""
        now = self._clock()
        if fresh or now >= self._next:
            self._next = now + REFRESH
            self._look()
        return self._keys

    def principal(self, user: str) -> principals.Principal:
        """Who the connection with ZAP User-Id ``user`` is, by its key's names in the set as
        ``current`` last read it (a key no longer there is a remote key granted nothing)."""
        return principals.principal(self._names.get(_split(user)[0], ()), self._grants)

    def _look(self) -> None:
        try:
            st = os.stat(self._directory)
        except OSError:
            st = None
        signature = None if st is None else (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_mode, st.st_uid)
        if signature is not None and signature == self._seen:
            return
        self._read()
        settled = st is not None and self._wall() - st.st_mtime_ns >= SETTLE * 1e9
        self._seen = signature if settled else None

    def _read(self) -> None:
        keys: dict[str, bytes] = {}
        grants: dict[str, frozenset[str]] = {}
        try:
            keys, grants = curve_keys.public_keys(self._root, "authorized"), curve_keys.grants(self._root)
        except curve_keys.CurveKeyMissing:
            pass
        except (curve_keys.CurveKeyUnsafe, OSError) as exc:  # as ZAP: fail closed, every key refused
            log.error("refusing every client key's requests: %s", exc)
        names: dict[str, list[str]] = {}
        for name, public in keys.items():
            names.setdefault(public.decode(), []).append(name)
        for key in self._keys - names.keys():
            log.info(
                "client key %r is no longer authorized: its connections' requests are refused",
                ", ".join(self._names[key]),
            )
        self._names, self._grants = names, grants
        self._keys = frozenset(names)
