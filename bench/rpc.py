"""Round trips and pipelined throughput of the trio adapter, against blocking pyzmq.

Everything is measured in the same run on the same machine; only the ratios mean much.

- baseline: a blocking REQ/REP pair in two threads of one process;
- trio floor: the least trio can do — two bare trio loops in two threads, each waiting on
  the zmq FD and calling send/recv itself, no framing, no adapter. It shows what the event
  loop alone costs against the baseline;
- mesh: the mesh's ``Service`` and async ``Client`` (the whole stack: msgpack framing,
  validation, per-call deadline, concurrency limit, owner task per socket), each in its own
  trio loop in one of two threads, like the baseline;
- mesh across processes: the same calls with the service in its own process, the topology
  the mesh runs in;
- pipelined: ``K`` calls in flight from one client to a service in its own process.

    .venv/bin/python bench/rpc.py [--round-trips N] [--pipelined N] [--in-flight K] [--repeat R]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
import trio  # noqa: E402
import zmq  # noqa: E402

from shared.client import open_client  # noqa: E402
from tests.support.peers.echo_service import ECHO, build_service  # noqa: E402

PAYLOAD = "x" * 40


def blocking_round_trips(address: str, n: int) -> float:
    ctx = zmq.Context.instance()
    ready = threading.Event()

    def serve() -> None:
        rep = ctx.socket(zmq.REP)
        rep.bind(address)
        ready.set()
        for _ in range(n):
            rep.send(rep.recv())
        rep.close(linger=0)

    server = threading.Thread(target=serve)
    server.start()
    ready.wait()
    req = ctx.socket(zmq.REQ)
    req.connect(address)
    payload = PAYLOAD.encode()
    started = time.perf_counter()
    for _ in range(n):
        req.send(payload)
        req.recv()
    elapsed = time.perf_counter() - started
    req.close(linger=0)
    server.join()
    return n / elapsed


async def _wait_in(sock: zmq.Socket, fd: int) -> None:
    while not sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
        await trio.lowlevel.wait_readable(fd)


def trio_floor_round_trips(address: str, n: int) -> float:
    ctx = zmq.Context.instance()
    ready = threading.Event()

    async def serve() -> None:
        router = ctx.socket(zmq.ROUTER)
        router.bind(address)
        fd = router.getsockopt(zmq.FD)
        ready.set()
        for _ in range(n):
            await _wait_in(router, fd)
            router.send_multipart(router.recv_multipart(zmq.NOBLOCK), zmq.NOBLOCK)
        router.close(linger=0)

    async def ask() -> float:
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect(address)
        fd = dealer.getsockopt(zmq.FD)
        payload = PAYLOAD.encode()
        started = time.perf_counter()
        for _ in range(n):
            dealer.send(payload, zmq.NOBLOCK)
            await _wait_in(dealer, fd)
            dealer.recv(zmq.NOBLOCK)
        elapsed = time.perf_counter() - started
        dealer.close(linger=0)
        return n / elapsed

    server = threading.Thread(target=trio.run, args=(serve,))
    server.start()
    ready.wait()
    try:
        return trio.run(ask)
    finally:
        server.join()


async def sequential_calls(address: str, n: int) -> float:
    """Round trips per second of ``n`` calls made one after another."""
    async with open_client(address) as client:
        await client.call(ECHO, {"text": "warm-up"})
        began = time.perf_counter()
        for _ in range(n):
            await client.call(ECHO, {"text": PAYLOAD})
        return n / (time.perf_counter() - began)


def mesh_round_trips(address: str, lock: Path, n: int) -> float:
    service = build_service(address, lock)
    started = threading.Event()
    box: dict = {}

    async def serve() -> None:
        box["token"] = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            await nursery.start(service.serve)
            started.set()

    server = threading.Thread(target=trio.run, args=(serve,))
    server.start()
    started.wait()

    try:
        return trio.run(sequential_calls, address, n)
    finally:
        trio.from_thread.run_sync(service.stop, 0.0, trio_token=box["token"])
        server.join()


def _service_process(address: str, lock: Path, concurrency: int) -> subprocess.Popen:
    program = (
        "import sys, trio; from pathlib import Path; from tests.support.peers.echo_service import build_service\n"
        "async def main():\n"
        f"    service = build_service(sys.argv[1], Path(sys.argv[2]), concurrency={concurrency})\n"
        "    async with trio.open_nursery() as n:\n"
        "        await n.start(service.serve); print('ready', flush=True)\n"
        "trio.run(main)\n"
    )
    server = subprocess.Popen([sys.executable, "-c", program, address, str(lock)], cwd=ROOT, stdout=subprocess.PIPE)
    server.stdout.readline()
    return server


def mesh_round_trips_across_processes(address: str, lock: Path, n: int) -> float:
    server = _service_process(address, lock, concurrency=32)

    try:
        return trio.run(sequential_calls, address, n)
    finally:
        server.kill()
        server.wait()


def _cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def mesh_pipelined(address: str, lock: Path, total: int, in_flight: int) -> tuple[float, float, float]:
    """Messages per second, and the share of a core the service and the client used."""
    server = _service_process(address, lock, concurrency=in_flight * 2)
    service_proc, client_proc = psutil.Process(server.pid), psutil.Process()
    try:

        async def flood() -> float:
            async with open_client(address) as client:
                await client.call(ECHO, {"text": "warm-up"})
                per_task = total // in_flight

                async def worker() -> None:
                    for _ in range(per_task):
                        await client.call(ECHO, {"text": PAYLOAD})

                cpu = _cpu_seconds(service_proc), _cpu_seconds(client_proc)
                began = time.perf_counter()
                async with trio.open_nursery() as nursery:
                    for _ in range(in_flight):
                        nursery.start_soon(worker)
                elapsed = time.perf_counter() - began
                return (
                    per_task * in_flight / elapsed,
                    (_cpu_seconds(service_proc) - cpu[0]) / elapsed,
                    (_cpu_seconds(client_proc) - cpu[1]) / elapsed,
                )

        return trio.run(flood)
    finally:
        server.kill()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--round-trips", type=int, default=10000)
    parser.add_argument("--pipelined", type=int, default=50000)
    parser.add_argument("--in-flight", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3, help="report the median of this many runs")
    args = parser.parse_args()

    results: dict[str, list] = {"base": [], "floor": [], "mesh": [], "mesh2": [], "piped": []}
    with tempfile.TemporaryDirectory(prefix="hm-bench-") as tmp:
        for i in range(args.repeat):
            results["base"].append(blocking_round_trips(f"ipc://{tmp}/b{i}", args.round_trips))
            results["floor"].append(trio_floor_round_trips(f"ipc://{tmp}/f{i}", args.round_trips))
            results["mesh"].append(mesh_round_trips(f"ipc://{tmp}/m{i}", Path(tmp) / f"m{i}.lock", args.round_trips))
            results["mesh2"].append(
                mesh_round_trips_across_processes(f"ipc://{tmp}/x{i}", Path(tmp) / f"x{i}.lock", args.round_trips)
            )
            results["piped"].append(
                mesh_pipelined(f"ipc://{tmp}/p{i}", Path(tmp) / f"p{i}.lock", args.pipelined, args.in_flight)
            )
    base, floor, mesh, mesh2 = (statistics.median(results[k]) for k in ("base", "floor", "mesh", "mesh2"))
    piped, service_cpu, client_cpu = sorted(results["piped"])[len(results["piped"]) // 2]
    print(f"blocking REQ/REP, two threads (baseline)  {base:9.0f} round trips/s")
    print(f"bare trio loops, two threads (floor)      {floor:9.0f} round trips/s   {floor / base:.2f}x baseline")
    print(
        f"mesh Service + Client, two threads        {mesh:9.0f} round trips/s   {mesh / base:.2f}x baseline "
        f"(target 0.80x), {mesh / floor:.2f}x floor"
    )
    print(f"mesh Service + Client, two processes      {mesh2:9.0f} round trips/s   {mesh2 / base:.2f}x baseline")
    print(
        f"mesh pipelined, {args.in_flight} in flight, two processes {piped:9.0f} msgs/s          (target 30000); "
        f"CPU: service {service_cpu:.0%}, client {client_cpu:.0%} of a core"
    )


if __name__ == "__main__":
    main()
