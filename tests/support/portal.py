"""The portal simulator (``python -m simulators.portal_sim``) as a real child process, or its
server in this process (``in_process=True``), with a small synchronous client for its
``/_sim/`` control API.

    with PortalSim(tmp_path) as sim:
        code = httpx.post(f"{sim.url}/api/oauth/device/code", data={"client_id": "hermes-cli"}).json()
        sim.approve(code["user_code"], "ada@example.com", tier="pro")

The state file and the simulator's stderr log live in ``directory``, so ``restart()`` keeps
accounts and the signing key, and a failed start shows what the simulator said.
"""

from __future__ import annotations

import ssl
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx

from shared.spawn import end_child, first_line
from simulators.portal_sim.server import PortalServer
from tests.support.processes import ROOT, python_env

START_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0


class SimControlError(AssertionError):
    """A control call the simulator refused: a mistake in the test, not a behaviour under test."""


class PortalSim:
    def __init__(
        self,
        directory: Path,
        *,
        tls: tuple[Path, Path] | None = None,
        verify: ssl.SSLContext | bool = True,
        state: bool = True,
        in_process: bool = False,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.tls = tls
        self.verify = verify  # how the control client checks the simulator's certificate
        self.state_file = self.directory / "portal_state.json" if state else None
        self.log_file = self.directory / "portal_sim.log"
        self.in_process = in_process
        self.proc: subprocess.Popen[bytes] | None = None
        self.server: PortalServer | None = None
        self.thread: threading.Thread | None = None
        self.client: httpx.Client | None = None
        self.url = ""
        self.start()

    # --- process ---------------------------------------------------------------------------------

    def argv(self) -> list[str]:
        argv = [sys.executable, "-m", "simulators.portal_sim", "--port", "0"]
        if self.state_file is not None:
            argv += ["--state", str(self.state_file)]
        if self.tls is not None:
            argv += ["--tls-cert", str(self.tls[0]), "--tls-key", str(self.tls[1])]
        return argv

    def start(self) -> None:
        if self.in_process:
            self._serve_here()
            return
        # stderr goes to a file: a pipe nobody reads would block the simulator once it filled.
        with open(self.log_file, "ab") as log:
            self.proc = subprocess.Popen(self.argv(), cwd=ROOT, env=python_env(), stdout=subprocess.PIPE, stderr=log)
        line = first_line(self.proc, START_TIMEOUT) or "(no base URL in time)"
        if not line.startswith(("http://", "https://")):
            self._kill()
            self.proc.stdout.close()
            raise RuntimeError(f"portal simulator did not start: {line!r}\n{self.log_tail()}")
        self.url = line
        self.client = httpx.Client(base_url=self.url, timeout=10, verify=self.verify)

    def _serve_here(self) -> None:
        """The simulator's server on a thread of this process, on the same state file."""
        context = None
        if self.tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.tls[0], self.tls[1])
        self.server = PortalServer("127.0.0.1", 0, ssl_context=context, state_path=self.state_file)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
        self.thread.start()
        self.url = self.server.base
        self.client = httpx.Client(base_url=self.url, timeout=10, verify=self.verify)

    def log_tail(self) -> str:
        return self.log_file.read_text(errors="replace")[-2000:] if self.log_file.exists() else ""

    def stop(self) -> int:
        """SIGTERM, then a bounded wait (SIGKILL if it is not enough); the exit code."""
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            assert self.thread is not None
            self.thread.join(timeout=STOP_TIMEOUT)
            self.server = None
            return 0
        if self.proc is None:
            return 0
        code = end_child(self.proc, STOP_TIMEOUT)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return code

    def _kill(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=STOP_TIMEOUT)

    def restart(self) -> None:
        """Stop and start again on the same state file (the port may change: read ``url``)."""
        self.stop()
        self.start()

    def __enter__(self) -> PortalSim:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- control API -----------------------------------------------------------------------------

    def _call(self, method: str, path: str, *, json: Any = None, params: dict[str, str] | None = None) -> Any:
        assert self.client is not None, "the simulator is stopped"
        answer = self.client.request(method, path, json=json, params=params)
        if answer.status_code != 200:
            raise SimControlError(f"{method} {path} answered {answer.status_code}: {answer.text}")
        return answer.json()

    def approve(self, user_code: str, email: str, tier: str = "free", host: str | None = None) -> str:
        """Approve a device code as ``email`` (the account is created if new); its account id."""
        body = {"user_code": user_code, "email": email, "tier": tier}
        if host is not None:
            body["host"] = host
        return self._call("POST", "/_sim/device/approve", json=body)["account"]

    def deny(self, user_code: str) -> None:
        self._call("POST", "/_sim/device/deny", json={"user_code": user_code})

    def fault(
        self,
        path: str,
        *,
        status: int | None = None,
        headers: dict[str, str] | None = None,
        body: Any = None,
        delay: float = 0.0,
        drop: bool = False,
        count: int = 1,
        method: str = "POST",
    ) -> int:
        """Queue ``count`` faults for the next ``method path`` requests; how many are queued now."""
        spec: dict[str, Any] = {"path": path, "method": method, "delay": delay, "drop": drop, "count": count}
        for name, value in (("status", status), ("headers", headers), ("body", body)):
            if value is not None:
                spec[name] = value
        return self._call("POST", "/_sim/faults", json=spec)["queued"]

    def clear_faults(self) -> None:
        self._call("DELETE", "/_sim/faults")

    def configure(self, **settings: Any) -> dict[str, Any]:
        """Change some settings; the whole config."""
        return self._call("POST", "/_sim/config", json=settings)

    def requests(self, path: str | None = None) -> list[dict[str, Any]]:
        return self._call("GET", "/_sim/requests", params=None if path is None else {"path": path})["requests"]

    def revoke(self, email: str) -> list[str]:
        """Revoke every refresh family of the account; the families revoked."""
        return self._call("POST", "/_sim/accounts/revoke", json={"email": email})["revoked"]

    def connect_app(self, anon_token: str, app: str) -> list[str]:
        """Add a connector to a guest identity; its connectors."""
        return self._call("POST", "/_sim/anonymous/connect", json={"token": anon_token, "app": app})["connectors"]

    def accounts(self) -> list[dict[str, Any]]:
        return self._call("GET", "/_sim/accounts")["accounts"]

    def grant(self, email: str, tier: str = "free") -> dict[str, Any]:
        """A whole device flow done here, as a signed-in client would have done it: the token answer."""
        assert self.client is not None, "the simulator is stopped"
        code = self.client.post("/api/oauth/device/code", data={"client_id": "hermes-cli"}).json()
        self.approve(code["user_code"], email, tier=tier)
        form = {
            "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
            "device_code": code["device_code"],
            "client_id": "hermes-cli",
        }
        answer = self.client.post("/api/oauth/token", data=form)
        if answer.status_code != 200:
            raise SimControlError(f"the token answer was {answer.status_code}: {answer.text}")
        return answer.json()

    def guest(self, *apps: str) -> str:
        """A new free-tier identity with ``apps`` connected: its ``anon_`` credential."""
        assert self.client is not None, "the simulator is stopped"
        anon = self.client.post("/api/anonymous/register").json()["token"]
        for app in apps:
            self.connect_app(anon, app)
        return anon

    def reset(self) -> None:
        """Forget accounts, codes, guests, faults and requests (the signing key and config stay)."""
        self._call("POST", "/_sim/reset")


def issue_tls(ca, directory: Path) -> tuple[Path, Path, ssl.SSLContext]:
    """A server certificate for 127.0.0.1 from the test CA ``ca`` (a ``trustme.CA``): the
    cert chain and key files the simulator's ``tls=`` takes, and a client context trusting ``ca``."""
    issued = ca.issue_cert("127.0.0.1", "localhost")
    cert, key = Path(directory) / "cert.pem", Path(directory) / "key.pem"
    for index, pem in enumerate(issued.cert_chain_pems):
        pem.write_to_path(str(cert), append=index > 0)
    issued.private_key_pem.write_to_path(str(key))
    trusted = ssl.create_default_context()
    ca.configure_trust(trusted)
    return cert, key, trusted
