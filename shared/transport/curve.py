"""The socket options of every TCP endpoint, each side's: CURVE, and ZMTP heartbeats; and the
rule that no tcp:// socket is ever opened without CURVE, nor on a libzmq whose CURVE is known
unsafe.

A service's options carry its secret key and its own ZAP domain (registered with this
process's ZAP handler, ``shared.transport.zap``); a client's carry its keypair and the server public
key it trusts. Both sides' carry the install's heartbeats (``shared.mesh_heartbeat``), so a peer
or link that went away drops the connection in seconds: a client then fails the calls in flight
on it at once (``connection_lost``). An ipc endpoint needs none of these: the private run dir
guards it, and a local service that exits closes its socket, which the client sees at once.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import zmq

from shared import mesh_heartbeat
from shared.errors import TransportError
from shared.transport import curve_keys

if TYPE_CHECKING:
    from shared.homes import Endpoint
    from shared.transport.authorized import AuthorizedKeys

Options = list[tuple[int, Any]]


# Below it a CURVE server can be crashed (CVE-2019-13132) or stalled (CVE-2020-15166) before
# any key is checked.
LIBZMQ_FLOOR = (4, 3, 3)


class PlaintextRefused(TransportError):
    code = "plaintext_refused"


class LibzmqTooOld(TransportError):
    """A tcp:// socket asked of a libzmq below ``LIBZMQ_FLOOR``."""

    code = "libzmq_too_old"


def server_options(endpoint: Endpoint) -> Options:
    """Options for the service's ROUTER and PUB; raises a ``curve_key_*`` error without keys."""
    if endpoint.tcp is None:
        return []
    refuse_old_libzmq(endpoint.control)  # before any key is read: a service started there exits at once
    from shared.transport import zap

    secret = curve_keys.server_secret(endpoint.root, endpoint.key_name)
    # One domain per install and service, so two installs served by one process never mix.
    digest = hashlib.sha256(os.fsencode(os.path.realpath(endpoint.root))).hexdigest()[:16]
    domain = f"{endpoint.key_name}/{digest}"
    zap.register(domain, endpoint.root)
    return [
        (zmq.CURVE_SERVER, 1),
        (zmq.CURVE_SECRETKEY, secret),
        (zmq.ZAP_DOMAIN, domain.encode()),
        *_heartbeats(endpoint, connects=False),
    ]


def authorized_keys(options: Iterable[tuple[int, Any]]) -> AuthorizedKeys | None:
    """The keys a service with socket ``options`` holds each request's connection to: its ZAP
    domain's install's. None without a registered ZAP domain (ipc): no key was judged."""
    domain = next((value for option, value in options if option == zmq.ZAP_DOMAIN), None)
    if domain is None:
        return None
    from shared.transport import zap
    from shared.transport.authorized import AuthorizedKeys

    root = zap.root_of(domain.decode())
    return None if root is None else AuthorizedKeys(root)


def client_options(endpoint: Endpoint) -> Options:
    """Options for a client of ``endpoint``: this install's client keypair (in a service's own
    store, the service's own) and the server key it trusts."""
    if endpoint.tcp is None:
        return []
    refuse_old_libzmq(endpoint.control)
    server = curve_keys.trusted_server(endpoint.root, endpoint.key_name, host=endpoint.host)
    # Another host's service is called with this home's client key; one of this install, with
    # the key its store keeps for calling it (a service's own store: its own key).
    secret = (
        curve_keys.client_secret(endpoint.root)
        if endpoint.host
        else curve_keys.client_secret_for(endpoint.root, endpoint.key_name)
    )
    return [
        (zmq.CURVE_SERVERKEY, server),
        (zmq.CURVE_PUBLICKEY, curve_keys.public_of(secret)),
        (zmq.CURVE_SECRETKEY, secret),
        *_heartbeats(endpoint, connects=True),
    ]


def _heartbeats(endpoint: Endpoint, *, connects: bool) -> Options:
    """ZMTP heartbeats for a socket of ``endpoint``; ``mesh_heartbeat_invalid`` for a bad setting."""
    beat = mesh_heartbeat.heartbeat(endpoint.root)
    options: Options = [
        (zmq.HEARTBEAT_IVL, _ms(beat.interval)),
        (zmq.HEARTBEAT_TIMEOUT, _ms(beat.timeout)),
        (zmq.HEARTBEAT_TTL, _ms(beat.ttl)),
    ]
    if connects:
        # A connect whose packets a dead link swallows is given up and tried again this soon,
        # so a link that comes back is found at once, not after the kernel's SYN backoff (minutes).
        options.append((zmq.CONNECT_TIMEOUT, _ms(beat.timeout)))
    return options


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def refuse_unsafe_tcp(addresses: Sequence[str] | Iterable[str], options: Iterable[tuple[int, Any]]) -> None:
    """Raise for a tcp:// bind or connect that would be unsafe: ``LibzmqTooOld`` on a libzmq
    below the floor, ``PlaintextRefused`` when its options set no CURVE role. ipc needs neither."""
    tcp = [address for address in addresses if address.startswith("tcp://")]
    if not tcp:
        return
    refuse_old_libzmq(tcp[0])
    if not any(option in (zmq.CURVE_SERVER, zmq.CURVE_SERVERKEY) for option, _ in options):
        raise PlaintextRefused(f"refusing plaintext TCP on {tcp[0]}: TCP endpoints are always CURVE")


def refuse_old_libzmq(address: str) -> None:
    """Raise ``LibzmqTooOld`` when this process's libzmq is below the floor, for TCP ``address``."""
    found = zmq.zmq_version_info()
    problem = libzmq_problem(found)
    if problem is not None:
        raise LibzmqTooOld(f"refusing TCP on {address}: {problem}", detail={"libzmq": _dotted(found)})


def libzmq_problem(found: tuple[int, ...]) -> str | None:
    """Why TCP is refused on libzmq ``found``, or None when it is at the floor or above."""
    if tuple(found) >= LIBZMQ_FLOOR:
        return None
    return (
        f"libzmq {_dotted(found)} is older than {_dotted(LIBZMQ_FLOOR)}: its CURVE servers have "
        "pre-authentication faults (CVE-2019-13132, CVE-2020-15166); ipc endpoints still work"
    )


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(str(part) for part in version)
