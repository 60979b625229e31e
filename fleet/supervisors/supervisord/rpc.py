"""Talking to supervisord over its XML-RPC unix socket: every call bounded by a timeout,
a dead socket reported as SupervisorUnavailable, supervisor's Faults mapped to typed errors.
Nothing parses ``supervisorctl`` text."""

from __future__ import annotations

import xmlrpc.client
from typing import Any

from fleet.supervisors.errors import SupervisorFailed, SupervisorUnavailable
from fleet.supervisors.supervisord.paths import MeshPaths

RPC_TIMEOUT = 10.0


def _proxy(paths: MeshPaths, timeout: float) -> xmlrpc.client.ServerProxy:
    from supervisor.xmlrpc import SupervisorTransport, UnixStreamHTTPConnection

    class _Connection(UnixStreamHTTPConnection):
        # supervisor's own connection ignores the timeout: connect with it, so no call can hang.
        def connect(self) -> None:
            import socket

            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(self.socketfile)
            except BaseException:
                sock.close()
                raise
            self.sock = sock

    def connection() -> _Connection:
        conn = _Connection("localhost", timeout=timeout)
        conn.socketfile = str(paths.socket)
        return conn

    transport = SupervisorTransport(serverurl=paths.server_url)
    transport._get_connection = connection  # the hook SupervisorTransport builds for unix:// urls
    return xmlrpc.client.ServerProxy("http://localhost", transport=transport)


def call(paths: MeshPaths, method: str, *args: Any, timeout: float = RPC_TIMEOUT) -> Any:
    """One XML-RPC call; supervisor's Faults pass through, a dead socket is SupervisorUnavailable."""
    try:
        return getattr(_proxy(paths, timeout), method)(*args)
    except xmlrpc.client.Fault:
        raise
    except (OSError, xmlrpc.client.ProtocolError, xmlrpc.client.ResponseError) as exc:
        raise SupervisorUnavailable(
            f"the mesh supervisor does not answer on {paths.socket}: {exc}",
            detail={"socket": str(paths.socket)},
        ) from None


def fault_code(name: str) -> int:
    from supervisor.xmlrpc import Faults

    return getattr(Faults, name)


def failure(what: str, fault: xmlrpc.client.Fault, **detail: Any) -> SupervisorFailed:
    return SupervisorFailed(
        f"{what}: supervisord answered {fault.faultString}",
        detail={"fault": fault.faultCode, "fault_string": fault.faultString, **detail},
    )


def process_infos(paths: MeshPaths) -> dict[str, dict[str, Any]]:
    return {info["name"]: info for info in call(paths, "supervisor.getAllProcessInfo")}
