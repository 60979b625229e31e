"""Round trips and pipelined throughput of the mesh's transport, against what else one could use.

Every contender runs its service in a process of its own and its client in this one, the
topology the mesh runs in. They are measured in the same run, interleaved (A B C ... A B C
...), and the median of the repeats is reported; only the ratios mean much.

- blocking pyzmq: REQ against REP for round trips, DEALER against ROUTER for pipelined: the
  baseline, no framing;
- bare trio floor: a trio loop on each side waiting on the zmq FD and calling send/recv
  itself, no framing: what the event loop alone costs;
- zmq.asyncio + protocol: what a user would pick instead: pyzmq's asyncio layer with this
  mesh's frames (``shared.protocol`` encode, decode and validation), replies matched by id;
- the same on uvloop, when ``uvloop`` is importable;
- mesh: the mesh's ``Service`` and async ``Client``, the whole stack.

``--transport tcp-curve`` runs every contender over TCP on 127.0.0.1 with CURVE (the mesh's
service with its ZAP handler and an authorized client key, as a real one), and the mesh over
ipc as well, for the ratio of the two.

    .venv/bin/python bench/rpc.py [--transport ipc|tcp-curve] [--round-trips N] [--pipelined N]
                                  [--in-flight K] [--repeat R]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import trio  # noqa: E402
import zmq  # noqa: E402
import zmq.asyncio  # noqa: E402

from shared import protocol  # noqa: E402
from shared.transport import curve_keys, zap  # noqa: E402
from shared.transport.call_rules import request_ids  # noqa: E402
from tests.support.async_client import open_client  # noqa: E402
from tests.support.peers.echo_service import ECHO, build_service  # noqa: E402

try:
    import uvloop
except ImportError:  # optional: the bench says it skipped the contender
    uvloop = None

PAYLOAD = "x" * 40
Options = list[tuple[int, int | bytes]]


# --- the servers, each run as ``rpc.py --serve KIND ADDRESS`` -----------------------------


def serve_blocking(kind: int, address: str, options: Options) -> None:
    sock = zmq.Context.instance().socket(kind)
    for option, value in options:
        sock.setsockopt(option, value)
    sock.bind(address)
    print("ready", flush=True)
    if kind == zmq.REP:
        while True:
            sock.send(sock.recv())
    while True:
        sock.send_multipart(sock.recv_multipart())


async def serve_trio_floor(address: str, options: Options) -> None:
    router = zmq.Context.instance().socket(zmq.ROUTER)
    for option, value in options:
        router.setsockopt(option, value)
    router.bind(address)
    fd = router.getsockopt(zmq.FD)
    print("ready", flush=True)
    while True:
        while not router.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            await trio.lowlevel.wait_readable(fd)
        router.send_multipart(router.recv_multipart(zmq.NOBLOCK), zmq.NOBLOCK)


async def serve_asyncio(address: str, options: Options) -> None:
    router = zmq.asyncio.Context.instance().socket(zmq.ROUTER)
    for option, value in options:
        router.setsockopt(option, value)
    router.bind(address)
    ops = {ECHO.name: ECHO}
    print("ready", flush=True)
    while True:
        peer, raw = await router.recv_multipart()
        try:
            request = protocol.decode_request(raw, ops)
            reply = protocol.encode_reply(request.id, "result", request.args["text"], version=request.version)
        except protocol.ProtocolError as exc:
            reply = protocol.encode_error(exc.request_id, exc)
        await router.send_multipart([peer, reply])


async def serve_mesh(address: str, lock: str, options: Options, authorized: str | None) -> None:
    if authorized is not None:  # judged by ZAP as a real service is, its client key authorized
        root = Path(lock).parent / "install"
        curve_keys.add_public(root, "authorized", "bench", authorized)
        zap.register("bench", root)
        options = [*options, (zmq.ZAP_DOMAIN, b"bench")]
    service = build_service(address, Path(lock), concurrency=256, options=options)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.serve)
        print("ready", flush=True)


def serve(kind: str, address: str, lock: str) -> None:
    given = json.loads(sys.stdin.readline())
    options = _options_from(given["options"])
    if kind == "rep":
        serve_blocking(zmq.REP, address, options)
    elif kind == "router":
        serve_blocking(zmq.ROUTER, address, options)
    elif kind == "floor":
        trio.run(serve_trio_floor, address, options)
    elif kind == "asyncio":
        asyncio.run(serve_asyncio(address, options))
    elif kind == "uvloop":
        assert uvloop is not None
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve_asyncio(address, options))
    else:
        trio.run(serve_mesh, address, lock, options, given["authorized"])


# --- CURVE: keys go to the server on its stdin, never on a command line --------------------


@dataclass(frozen=True)
class Curve:
    server_public: bytes
    server_secret: bytes
    client_public: bytes
    client_secret: bytes

    @classmethod
    def generate(cls) -> Curve:
        return cls(*zmq.curve_keypair(), *zmq.curve_keypair())

    def server(self) -> dict[str, str]:
        return {"CURVE_SERVER": "1", "CURVE_SECRETKEY": self.server_secret.decode()}

    def client(self) -> Options:
        return [
            (zmq.CURVE_SERVERKEY, self.server_public),
            (zmq.CURVE_PUBLICKEY, self.client_public),
            (zmq.CURVE_SECRETKEY, self.client_secret),
        ]


def _options_from(named: dict[str, str]) -> Options:
    return [(getattr(zmq, name), int(value) if value.isdigit() else value.encode()) for name, value in named.items()]


@dataclass(frozen=True)
class Endpoint:
    address: str
    server_options: dict[str, str]
    client_options: Options
    authorized: str | None = None  # the client public key the mesh server's ZAP handler accepts


class Endpoints:
    """Fresh addresses for each measurement: ipc paths in one directory, or loopback ports."""

    def __init__(self, directory: Path, transport: str, curve: Curve | None):
        self._directory = directory
        self._transport = transport
        self._curve = curve
        self._count = 0

    def next(self, transport: str | None = None) -> Endpoint:
        self._count += 1
        if (transport or self._transport) == "ipc":
            return Endpoint(f"ipc://{self._directory}/e{self._count}.ctl", {}, [])
        assert self._curve is not None
        with socket.socket() as probe:  # a free port; the server binds it a moment later
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        return Endpoint(
            f"tcp://127.0.0.1:{port}", self._curve.server(), self._curve.client(), self._curve.client_public.decode()
        )

    def lock(self) -> str:
        return str(self._directory / f"e{self._count}.lock")


def start_server(kind: str, endpoint: Endpoint, lock: str) -> subprocess.Popen:
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", kind, endpoint.address, lock],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write(json.dumps({"options": endpoint.server_options, "authorized": endpoint.authorized}) + "\n")
    server.stdin.flush()
    if server.stdout.readline().strip() != "ready":
        server.kill()
        raise RuntimeError(f"the {kind} server did not start")
    return server


# --- the clients ---------------------------------------------------------------------------


def _zsock(kind: int, endpoint: Endpoint, context: zmq.Context | None = None) -> zmq.Socket:
    sock = (context or zmq.Context.instance()).socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    for option, value in endpoint.client_options:
        sock.setsockopt(option, value)
    sock.connect(endpoint.address)
    return sock


def blocking_round_trips(endpoint: Endpoint, n: int) -> float:
    req = _zsock(zmq.REQ, endpoint)
    payload = PAYLOAD.encode()
    req.send(payload)
    req.recv()
    started = time.perf_counter()
    for _ in range(n):
        req.send(payload)
        req.recv()
    elapsed = time.perf_counter() - started
    req.close()
    return n / elapsed


def blocking_pipelined(endpoint: Endpoint, total: int, in_flight: int) -> float:
    dealer = _zsock(zmq.DEALER, endpoint)
    payload = PAYLOAD.encode()
    dealer.send(payload)
    dealer.recv()
    started = time.perf_counter()
    for _ in range(in_flight):
        dealer.send(payload)
    for sent in range(in_flight, total + in_flight):
        dealer.recv()
        if sent < total:
            dealer.send(payload)
    elapsed = time.perf_counter() - started
    dealer.close()
    return total / elapsed


def trio_floor_round_trips(endpoint: Endpoint, n: int) -> float:
    async def ask() -> float:
        dealer = _zsock(zmq.DEALER, endpoint)
        fd = dealer.getsockopt(zmq.FD)
        payload = PAYLOAD.encode()

        async def one() -> None:
            dealer.send(payload, zmq.NOBLOCK)
            while not dealer.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                await trio.lowlevel.wait_readable(fd)
            dealer.recv(zmq.NOBLOCK)

        await one()
        started = time.perf_counter()
        for _ in range(n):
            await one()
        elapsed = time.perf_counter() - started
        trio.lowlevel.notify_closing(fd)
        dealer.close()
        return n / elapsed

    return trio.run(ask)


class AsyncioClient:
    """A small asyncio client of the mesh protocol, as a user would write one: one DEALER,
    a reader task, replies matched to calls by id."""

    def __init__(self, endpoint: Endpoint):
        self._context = zmq.asyncio.Context()
        self._sock = _zsock(zmq.DEALER, endpoint, self._context)
        self._waiting: dict[str, asyncio.Future] = {}
        self._ids = request_ids()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        while True:
            raw = await self._sock.recv()
            reply = protocol.decode_reply(raw)
            future = self._waiting.pop(reply.id, None)
            if future is not None and not future.done():
                future.set_result(reply)

    async def call(self, text: str) -> Any:
        request_id = self._ids()
        raw = protocol.encode_request(request_id, ECHO.name, {"text": text}, deadline_ms=30_000)
        future = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        await self._sock.send(raw)
        reply = await asyncio.wait_for(future, ECHO.timeout)
        return reply.raise_for_error()

    def close(self) -> None:
        self._reader.cancel()
        self._sock.close()
        self._context.term()


def _asyncio_run(uv: bool, main: Callable[[], Any]) -> Any:
    factory = uvloop.new_event_loop if uv and uvloop is not None else None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main())


def asyncio_round_trips(endpoint: Endpoint, n: int, uv: bool = False) -> float:
    async def main() -> float:
        client = AsyncioClient(endpoint)
        await client.call("warm-up")
        started = time.perf_counter()
        for _ in range(n):
            await client.call(PAYLOAD)
        elapsed = time.perf_counter() - started
        client.close()
        return n / elapsed

    return _asyncio_run(uv, main)


def asyncio_pipelined(endpoint: Endpoint, total: int, in_flight: int, uv: bool = False) -> float:
    async def main() -> float:
        client = AsyncioClient(endpoint)
        await client.call("warm-up")
        per_task = total // in_flight

        async def worker() -> None:
            for _ in range(per_task):
                await client.call(PAYLOAD)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        elapsed = time.perf_counter() - started
        client.close()
        return per_task * in_flight / elapsed

    return _asyncio_run(uv, main)


def mesh_round_trips(endpoint: Endpoint, n: int) -> float:
    async def main() -> float:
        async with open_client(endpoint.address, options=endpoint.client_options) as client:
            await client.call(ECHO, {"text": "warm-up"})
            started = time.perf_counter()
            for _ in range(n):
                await client.call(ECHO, {"text": PAYLOAD})
            return n / (time.perf_counter() - started)

    return trio.run(main)


def mesh_pipelined(endpoint: Endpoint, total: int, in_flight: int) -> float:
    async def main() -> float:
        async with open_client(endpoint.address, options=endpoint.client_options) as client:
            await client.call(ECHO, {"text": "warm-up"})
            per_task = total // in_flight

            async def worker() -> None:
                for _ in range(per_task):
                    await client.call(ECHO, {"text": PAYLOAD})

            started = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for _ in range(in_flight):
                    nursery.start_soon(worker)
            return per_task * in_flight / (time.perf_counter() - started)

    return trio.run(main)


# --- the run -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Contender:
    name: str
    round_trip_server: str
    round_trips: Callable[[Endpoint, int], float]
    pipelined_server: str | None = None
    pipelined: Callable[[Endpoint, int, int], float] | None = None
    transport: str | None = None  # None: the run's


def contenders(transport: str) -> list[Contender]:
    chosen = [
        Contender("blocking pyzmq (baseline)", "rep", blocking_round_trips, "router", blocking_pipelined),
        Contender("bare trio loops (floor)", "floor", trio_floor_round_trips),
        Contender("zmq.asyncio + protocol", "asyncio", asyncio_round_trips, "asyncio", asyncio_pipelined),
    ]
    if uvloop is not None:
        chosen.append(
            Contender(
                "zmq.asyncio on uvloop + protocol",
                "uvloop",
                lambda e, n: asyncio_round_trips(e, n, uv=True),
                "uvloop",
                lambda e, t, k: asyncio_pipelined(e, t, k, uv=True),
            )
        )
    chosen.append(Contender("mesh Service + Client", "mesh", mesh_round_trips, "mesh", mesh_pipelined))
    if transport != "ipc":
        chosen.append(
            Contender("mesh Service + Client, ipc", "mesh", mesh_round_trips, "mesh", mesh_pipelined, transport="ipc")
        )
    return chosen


def measure(endpoints: Endpoints, kind: str, transport: str | None, run: Callable[[Endpoint], float]) -> float:
    endpoint = endpoints.next(transport)
    server = start_server(kind, endpoint, endpoints.lock())
    try:
        return run(endpoint)
    finally:
        server.kill()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transport", choices=("ipc", "tcp-curve"), default="ipc")
    parser.add_argument("--round-trips", type=int, default=4000)
    parser.add_argument("--pipelined", type=int, default=20000)
    parser.add_argument("--in-flight", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3, help="report the median of this many runs")
    parser.add_argument("--serve", nargs=3, metavar=("KIND", "ADDRESS", "LOCK"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(*args.serve)
        return

    chosen = contenders(args.transport)
    trips: dict[str, list[float]] = {c.name: [] for c in chosen}
    piped: dict[str, list[float]] = {c.name: [] for c in chosen if c.pipelined is not None}
    curve = Curve.generate() if args.transport == "tcp-curve" else None
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hm-bench-") as tmp:
        endpoints = Endpoints(Path(tmp), args.transport, curve)
        for _ in range(args.repeat):
            for c in chosen:
                trips[c.name].append(
                    measure(
                        endpoints, c.round_trip_server, c.transport, lambda e, c=c: c.round_trips(e, args.round_trips)
                    )
                )
            for c in chosen:
                if c.pipelined is not None and c.pipelined_server is not None:
                    pipelined = c.pipelined
                    piped[c.name].append(
                        measure(
                            endpoints,
                            c.pipelined_server,
                            c.transport,
                            lambda e, p=pipelined: p(e, args.pipelined, args.in_flight),
                        )
                    )
    report(args, chosen, trips, piped, time.perf_counter() - began)


def report(
    args: argparse.Namespace,
    chosen: list[Contender],
    trips: dict[str, list[float]],
    piped: dict[str, list[float]],
    seconds: float,
) -> None:
    rt = {name: statistics.median(values) for name, values in trips.items()}
    pp = {name: statistics.median(values) for name, values in piped.items()}
    print(
        f"transport {args.transport}; medians of {args.repeat} interleaved runs; services in their own processes; "
        f"{seconds:.0f} s"
    )
    print(f"{'contender':40} {'round trips/s':>14} {f'pipelined msgs/s ({args.in_flight} in flight)':>36}")
    for c in chosen:
        pipelined = f"{pp[c.name]:,.0f}" if c.name in pp else "-"
        print(f"{c.name:40} {rt[c.name]:>14,.0f} {pipelined:>36}")
    mesh, asyncio_, floor = "mesh Service + Client", "zmq.asyncio + protocol", "bare trio loops (floor)"
    print()
    print("target                                           ratio   goal")
    checks = [
        ("mesh round trips vs zmq.asyncio", rt[mesh] / rt[asyncio_], 1.5),
        ("mesh round trips vs bare trio floor", rt[mesh] / rt[floor], 0.7),
        ("mesh pipelined vs zmq.asyncio", pp[mesh] / pp[asyncio_], 2.0),
    ]
    if uvloop is not None:
        checks.append(
            ("mesh round trips vs zmq.asyncio on uvloop", rt[mesh] / rt["zmq.asyncio on uvloop + protocol"], 0)
        )
        checks.append(("mesh pipelined vs zmq.asyncio on uvloop", pp[mesh] / pp["zmq.asyncio on uvloop + protocol"], 0))
    else:
        print("(uvloop is not importable: its contender was skipped)")
    if args.transport != "ipc":
        ipc = "mesh Service + Client, ipc"
        # Within 1.3x of ipc: the CURVE/TCP rate is at least 1/1.3 of the ipc rate.
        checks.append(("mesh round trips, ipc / CURVE-TCP", rt[ipc] / rt[mesh], -1.3))
        checks.append(("mesh pipelined, ipc / CURVE-TCP", pp[ipc] / pp[mesh], -1.3))
    for label, ratio, goal in checks:
        if goal > 0:
            verdict = f">= {goal:.1f}x  {'met' if ratio >= goal else 'NOT met'}"
        elif goal < 0:
            verdict = f"<= {-goal:.1f}x  {'met' if ratio <= -goal else 'NOT met'}"
        else:
            verdict = "(no goal)"
        print(f"{label:46} {ratio:6.2f}x  {verdict}")


if __name__ == "__main__":
    main()
