"""A storm of unauthenticated TCP connections against one port: what a hostile network does
to a CURVE service. Run as a process of its own, so that its work is not its target's client's:

    python -m tests.support.storm HOST PORT COUNT

It holds COUNT connections, each of a kind by its index: a quarter say nothing, a quarter send
garbage (and more garbage to every answer), a quarter stall half-way through the ZMTP greeting,
and a quarter send a whole CURVE greeting and stall before the handshake. Each one the service
closes is opened again ``REOPEN`` later. On SIGTERM it prints one JSON line of counts and ends.
"""

from __future__ import annotations

import errno
import json
import random
import selectors
import signal
import socket
import sys
import time

# The greeting's first 10 bytes (signature and major version), and a whole CURVE client one.
_GREETING_HEAD = b"\xff" + bytes(8) + b"\x7f"
_CURVE_GREETING = _GREETING_HEAD + bytes([3, 0]) + b"CURVE".ljust(20, b"\0") + b"\0" + bytes(31)
KINDS = ("silent", "garbage", "half_greeting", "curve_greeting")
# How soon the storm opens a connection the service closed: a flood that keeps coming, not a
# tight loop whose cost on a small machine would be the attacker's CPU rather than the service's.
REOPEN = 0.1


def attack(host: str, port: int, count: int) -> None:
    """Hold ``count`` connections to ``host:port`` until SIGTERM, each of a kind by its index,
    reopening each one the service closes ``REOPEN`` later. Prints ``{"opened"}`` each time
    another ``count`` were opened, so a caller can wait for the churn, and one JSON line of
    counts at the end."""
    selector = selectors.DefaultSelector()
    opened = closed = refused = 0
    stopped: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopped.append(signum))
    started = time.monotonic()

    def open_one(index: int) -> None:
        nonlocal opened, refused
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        failed = sock.connect_ex((host, port))
        if failed not in (0, errno.EINPROGRESS):
            sock.close()
            refused += 1
            return
        opened += 1
        selector.register(sock, selectors.EVENT_WRITE, (index, False))
        if opened % count == 0:
            print(json.dumps({"opened": opened}), flush=True)

    for index in range(count):
        open_one(index)
    reopen: list[tuple[float, int]] = []  # (when, index): a closed one is opened again after REOPEN
    while not stopped:
        for key, events in selector.select(REOPEN / 4):
            sock, (index, said) = key.fileobj, key.data
            assert isinstance(sock, socket.socket)
            kind = KINDS[index % len(KINDS)]
            try:
                if events & selectors.EVENT_WRITE and not said:
                    first = {
                        "silent": b"",
                        "garbage": random.randbytes(64),
                        "half_greeting": _GREETING_HEAD,
                        "curve_greeting": _CURVE_GREETING,
                    }[kind]
                    if first:
                        sock.send(first)
                    selector.modify(sock, selectors.EVENT_READ, (index, True))
                    continue
                data = sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if not data:  # the service closed it: open it again soon, as a storm does
                selector.unregister(sock)
                sock.close()
                reopen.append((time.monotonic() + REOPEN, index))
                continue
            if kind == "garbage":
                try:
                    sock.send(random.randbytes(64))
                except OSError:
                    pass
        due = [index for when, index in reopen if when <= time.monotonic()]
        reopen = [(when, index) for when, index in reopen if when > time.monotonic()]
        closed += len(due)
        for index in due:
            open_one(index)
    held = len(selector.get_map())
    for key in list(selector.get_map().values()):
        key.fileobj.close()  # type: ignore[union-attr]
    seconds = time.monotonic() - started
    counts = {"opened": opened, "closed_by_service": closed, "refused": refused, "held_at_end": held}
    print(json.dumps({**counts, "reopened_per_second": round(closed / seconds, 1)}), flush=True)


if __name__ == "__main__":
    attack(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
