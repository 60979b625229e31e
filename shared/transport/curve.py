"""CURVE on every TCP endpoint: the socket options of each side, and the rule that no
tcp:// socket is ever opened without them.

A service's options carry its secret key and its own ZAP domain (registered with this
process's ZAP handler, ``shared.transport.zap``); a client's carry its keypair and the server public
key it trusts. An ipc endpoint needs none (the private run dir guards it).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import zmq

from shared.errors import TransportError
from shared.transport import curve_keys

if TYPE_CHECKING:
    from shared.homes import Endpoint

Options = list[tuple[int, Any]]


class PlaintextRefused(TransportError):
    code = "plaintext_refused"


def server_options(endpoint: Endpoint) -> Options:
    """Options for the service's ROUTER and PUB; raises a ``curve_key_*`` error without keys."""
    if endpoint.tcp is None:
        return []
    from shared.transport import zap

    secret = curve_keys.server_secret(endpoint.root, endpoint.key_name)
    # One domain per install and service, so two installs served by one process never mix.
    digest = hashlib.sha256(os.fsencode(os.path.realpath(endpoint.root))).hexdigest()[:16]
    domain = f"{endpoint.key_name}/{digest}"
    zap.register(domain, endpoint.root)
    return [(zmq.CURVE_SERVER, 1), (zmq.CURVE_SECRETKEY, secret), (zmq.ZAP_DOMAIN, domain.encode())]


def client_options(endpoint: Endpoint) -> Options:
    """Options for a client of ``endpoint``: this install's client keypair and the server key it trusts."""
    if endpoint.tcp is None:
        return []
    server = curve_keys.trusted_server(endpoint.root, endpoint.key_name)
    secret = curve_keys.client_secret(endpoint.root)
    return [
        (zmq.CURVE_SERVERKEY, server),
        (zmq.CURVE_PUBLICKEY, curve_keys.public_of(secret)),
        (zmq.CURVE_SECRETKEY, secret),
    ]


def refuse_plaintext(addresses: Sequence[str] | Iterable[str], options: Iterable[tuple[int, Any]]) -> None:
    """Raise ``PlaintextRefused`` for a tcp:// bind or connect whose options set no CURVE role."""
    tcp = [address for address in addresses if address.startswith("tcp://")]
    if tcp and not any(option in (zmq.CURVE_SERVER, zmq.CURVE_SERVERKEY) for option, _ in options):
        raise PlaintextRefused(f"refusing plaintext TCP on {tcp[0]}: TCP endpoints are always CURVE")
