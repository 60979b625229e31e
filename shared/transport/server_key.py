"""A CURVE service follows its own secret key file, so a rotation takes effect without a restart.

``hermes mesh keys rotate --service NAME`` lets the old key serve for its grace, then writes the
new secret (and this install's trust in its public half). The service looks at its secret file
every ``KEY_CHECK`` seconds (one ``stat`` while nothing changed); once it holds another valid key,
the service binds its endpoint again with it. The re-bind closes every connection made under
the old key: a client that still trusts the old public key is refused at its next handshake
(``server_key_mismatch``), one that trusts the new key is served. A file that cannot be read as
a safe key is logged and the old key kept: the service serves on.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import trio
import zmq

from shared.transport import curve_keys

log = logging.getLogger(__name__)

KEY_CHECK = 0.5  # seconds between two looks at the secret file
_UNUSABLE = (curve_keys.CurveKeyInvalid, curve_keys.CurveKeyUnsafe, curve_keys.CurveKeyMissing)


class ServerKey:
    """The secret key a service serves with, and the file that may replace it."""

    def __init__(self, root: Path, name: str, secret: bytes) -> None:
        self.root, self.name, self.secret = root, name, secret
        self.path = curve_keys.store(root) / "server" / f"{name}.key_secret"
        self._seen = _signature(self.path)

    @classmethod
    def of(cls, options: Iterable[tuple[int, Any]]) -> ServerKey | None:
        """The key of a service with socket ``options``: found through its ZAP domain
        (``<key name>/<digest>``, registered with its install); None for a socket without one."""
        given = dict(options)
        domain, secret = given.get(zmq.ZAP_DOMAIN), given.get(zmq.CURVE_SECRETKEY)
        if not isinstance(domain, bytes) or not isinstance(secret, bytes):
            return None
        from shared.transport import zap

        root = zap.root_of(domain.decode())
        return None if root is None else cls(root, domain.decode().split("/", 1)[0], secret)

    def replaced(self) -> bytes | None:
        """The new secret once the file holds another valid key than the one served; else None."""
        seen = _signature(self.path)
        if seen == self._seen:
            return None
        self._seen = seen
        try:
            secret = curve_keys.server_secret(self.root, self.name)
        except _UNUSABLE as exc:
            log.error("%s: its new secret key cannot be used, the old one serves on: %s", self.name, exc.message)
            return None
        if secret == self.secret:
            return None
        self.secret = secret
        return secret


def _signature(path: Path) -> tuple[int, int, int] | None:
    """What changes with the file: its inode (an atomic write is a new one), and its ctime,
    which its content, mode and owner all move."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return st.st_ino, st.st_ctime_ns, st.st_size


async def follow(key: ServerKey, rebind: Callable[[list[tuple[int, int | bytes]]], Awaitable[None]]) -> None:
    """Bind again, through ``rebind``, with each new key ``key``'s file holds. A re-bind that
    fails (the port taken meanwhile) is raised: the service ends, and its supervisor starts it
    again, with the new key."""
    while True:
        await trio.sleep(KEY_CHECK)
        secret = key.replaced()  # one stat while nothing changed
        if secret is not None:
            await rebind([(zmq.CURVE_SECRETKEY, secret)])
            log.info("%s: serving with its new key; connections made under the old one are closed", key.name)
