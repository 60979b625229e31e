"""Which hosts a policy may name, and which of them a call may target. Standard library only.

The operator plugin carries this very file (``pohunek/hosts.py``, byte for byte, checked by the
test suite), so a plugin running inside a Hermes without this project's packages judges hosts
by the same rule as the installer that wrote its policy.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

WILDCARD = "*"
LOCAL = "local"
MAX_HOST_CHARS = 253

_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
# A last label of digits, or 0x and hex, makes a name an IPv4 literal to inet_aton ("127.1").
_NUMERIC_LABEL = re.compile(r"[0-9]+|0[xX][0-9A-Fa-f]*")


def valid_host(value: Any, *, allow_wildcard: bool = False) -> bool:
    """``local``, a DNS name (labels of letters, digits and inner hyphens, at most 253 chars),
    or ``*`` when ``allow_wildcard``; never an IP literal."""
    if type(value) is not str:
        return False
    if value == LOCAL or (allow_wildcard and value == WILDCARD):
        return True
    if not 0 < len(value) <= MAX_HOST_CHARS:
        return False
    # No IPv6 literal fits a label (no ":"), and every IPv4 one ends in a numeric label.
    labels = value.split(".")
    return all(_LABEL.fullmatch(label) for label in labels) and not _NUMERIC_LABEL.fullmatch(labels[-1])


def host_allowed(allowed_hosts: Collection[str], host: str) -> bool:
    """The exact host is listed, or ``*`` is and the host is a valid name."""
    if not valid_host(host):
        return False
    return host in allowed_hosts or WILDCARD in allowed_hosts
