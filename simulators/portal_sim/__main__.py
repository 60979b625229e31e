"""``python -m simulators.portal_sim``: serve the simulator until SIGTERM or SIGINT.

The first line on stdout is the base URL, so a parent process can start it on port 0 and
learn where it listens.
"""

from __future__ import annotations

import argparse
import signal
import ssl
import sys
import threading
from pathlib import Path

from shared.files import StateFileCorrupt
from simulators.portal_sim.server import PortalServer


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range: {port}")
    return port


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulators.portal_sim", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=_port, default=0, help="0 picks a free port")
    parser.add_argument("--tls-cert", type=Path, metavar="FILE", help="PEM certificate chain (serves https)")
    parser.add_argument("--tls-key", type=Path, metavar="FILE", help="PEM private key of --tls-cert")
    parser.add_argument("--state", type=Path, metavar="FILE", help="keep accounts and the signing key here")
    args = parser.parse_args(argv)
    if (args.tls_cert is None) != (args.tls_key is None):
        parser.error("--tls-cert and --tls-key go together")

    try:
        context = None
        if args.tls_cert is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(args.tls_cert, args.tls_key)
        server = PortalServer(args.host, args.port, ssl_context=context, state_path=args.state)
    except (OSError, StateFileCorrupt) as exc:
        print(f"portal_sim: {exc}", file=sys.stderr)
        return 1

    def stop(signum: int, frame: object) -> None:
        # shutdown() waits for serve_forever to return, so it cannot run on serve_forever's thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(server.base, flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
