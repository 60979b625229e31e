"""Where ``hermes mesh metrics --listen`` may serve: a loopback address or a unix socket. No I/O.

The listener answers anyone who can connect, with no authentication, and what it serves is the
fleet's state (profiles, code, health, sign-in expiry): so it binds loopback only, for a
Prometheus on this host, or a unix socket, which its mode (0600) keeps to this user.
"""

from __future__ import annotations

import ipaddress
from typing import NamedTuple

from hermes_cli.errors import CliError

UNIX = "unix:"
MAX_UNIX_PATH = 107  # bytes, the kernel's sun_path less its NUL


class MetricsListenInvalid(CliError):
    """``--listen`` names no address it could take (``host:port``, ``[v6]:port`` or ``unix:/path``)."""

    code = "metrics_listen_invalid"


class MetricsListenNotLoopback(CliError):
    """``--listen`` names an address other hosts could reach: the metrics are served unauthenticated."""

    code = "metrics_listen_not_loopback"


class ListenAddress(NamedTuple):
    host: str | None  # an IP address; None for a unix socket
    port: int
    path: str | None = None  # the unix socket's path

    def url(self) -> str:
        if self.path is not None:
            return f"unix:{self.path} (GET /metrics)"
        host = f"[{self.host}]" if self.host and ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"


def parse(value: str) -> ListenAddress:
    def invalid(why: str) -> MetricsListenInvalid:
        return MetricsListenInvalid(
            f"--listen {value!r}: {why} (give 127.0.0.1:PORT, [::1]:PORT or unix:/PATH)",
            detail={"field": "listen", "value": value},
        )

    if value.startswith(UNIX):
        path = value[len(UNIX) :]
        if not path.startswith("/"):
            raise invalid("a unix socket's path must be absolute")
        if len(path.encode()) > MAX_UNIX_PATH or "\0" in path:
            raise invalid(f"a unix socket's path must fit in {MAX_UNIX_PATH} bytes")
        return ListenAddress(None, 0, path)
    host, sep, port_text = value.rpartition(":")
    if not sep or not host:
        raise invalid("no host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port_text.isascii() or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise invalid("the port must be a number from 0 to 65535")
    if host == "localhost":
        host = "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise MetricsListenNotLoopback(
            f"--listen {value!r}: only a loopback address (or localhost) is taken, not a name that may"
            " resolve to any: the metrics are served unauthenticated",
            detail={"field": "listen", "value": value},
        ) from None
    if not address.is_loopback:
        raise MetricsListenNotLoopback(
            f"--listen {value!r}: {host} is not a loopback address, and the metrics are served"
            " unauthenticated; listen on 127.0.0.1, ::1 or a unix socket",
            detail={"field": "listen", "value": value},
        )
    return ListenAddress(str(address), int(port_text))
