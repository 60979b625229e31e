"""Round trips and pipelined throughput of the trio adapter, against blocking pyzmq.

Baseline: a blocking REQ/REP pair in two threads of one process. Measured: the mesh's
``Service`` and async ``Client`` (the whole stack: framing, validation, per-call deadline,
concurrency limit), each running its own trio loop in one of two threads of one process,
so both sides share the same libzmq context and GIL as the baseline. Same run, same
machine; only ratios are meaningful.

    .venv/bin/python bench/rpc.py [--round-trips N] [--pipelined N] [--in-flight K]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trio  # noqa: E402
import zmq  # noqa: E402

from shared.client import open_client  # noqa: E402
from shared.protocol import Field, OpSpec  # noqa: E402
from shared.service import Service  # noqa: E402

ECHO = OpSpec("echo", {"text": Field(str, max_len=1024)}, idempotent=True)
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


def _serve_in_thread(address: str, lock: Path, concurrency: int) -> tuple[threading.Thread, Service, trio.lowlevel.TrioToken]:
    service = Service("bench", address, lock_path=lock, concurrency=concurrency)

    @service.handles(ECHO)
    async def echo(call):
        return call.args["text"]

    started = threading.Event()
    box: dict = {}

    async def main() -> None:
        box["token"] = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            await nursery.start(service.serve)
            started.set()

    thread = threading.Thread(target=trio.run, args=(main,))
    thread.start()
    started.wait()
    return thread, service, box["token"]


def trio_rates(address: str, lock: Path, round_trips: int, pipelined: int, in_flight: int) -> tuple[float, float]:
    thread, service, token = _serve_in_thread(address, lock, concurrency=in_flight * 2)

    async def client() -> tuple[float, float]:
        async with open_client(address) as c:
            await c.call(ECHO, {"text": "warm-up"})
            started = time.perf_counter()
            for _ in range(round_trips):
                await c.call(ECHO, {"text": PAYLOAD})
            rt = round_trips / (time.perf_counter() - started)

            per_task = pipelined // in_flight

            async def worker() -> None:
                for _ in range(per_task):
                    await c.call(ECHO, {"text": PAYLOAD})

            started = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for _ in range(in_flight):
                    nursery.start_soon(worker)
            piped = per_task * in_flight / (time.perf_counter() - started)
            return rt, piped

    try:
        return trio.run(client)
    finally:
        trio.from_thread.run_sync(service.stop, 0.0, trio_token=token)
        thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--round-trips", type=int, default=20000)
    parser.add_argument("--pipelined", type=int, default=50000)
    parser.add_argument("--in-flight", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3, help="take the median of this many runs")
    args = parser.parse_args()

    base, rts, pipes = [], [], []
    with tempfile.TemporaryDirectory(prefix="hermes-bench-") as tmp:
        for i in range(args.repeat):
            base.append(blocking_round_trips(f"ipc://{tmp}/base{i}.sock", args.round_trips))
            rt, piped = trio_rates(f"ipc://{tmp}/mesh{i}.ctl", Path(tmp) / f"mesh{i}.lock", args.round_trips, args.pipelined, args.in_flight)
            rts.append(rt)
            pipes.append(piped)
    b, r, p = statistics.median(base), statistics.median(rts), statistics.median(pipes)
    print(f"blocking REQ/REP (baseline)      {b:10.0f} round trips/s")
    print(f"trio Service + Client            {r:10.0f} round trips/s   ratio {r / b:.2f} (target >= 0.80)")
    print(f"trio pipelined, {args.in_flight} in flight     {p:10.0f} msgs/s          (target >= 30000)")


if __name__ == "__main__":
    main()
