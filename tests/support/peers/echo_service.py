"""A real service process for transport tests: ``python -m tests.support.peers.echo_service ADDRESS LOCK``.

Prints ``ready <pid>`` once bound, then serves until SIGTERM/SIGINT or kill. ``echo``,
``fail_now`` and ``big`` have plain handlers, run inline; the others are async.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

import trio

from shared.errors import HermesError
from shared.protocol import Field, OpSpec, Remote
from shared.transport.service import Call, Service

ECHO = OpSpec("echo", {"text": Field(str, max_len=1 << 21)}, idempotent=True, remote=Remote.ALLOWED)
ECHO_ASYNC = OpSpec("echo_async", {"text": Field(str, max_len=1 << 21)}, idempotent=True, remote=Remote.ALLOWED)
SLOW = OpSpec("slow", {"seconds": Field(float, min=0, max=60)}, timeout=60, remote=Remote.ALLOWED)
STREAM = OpSpec(
    "count",
    {"to": Field(int, min=0, max=10_000), "pause": Field(float, required=False, min=0, max=1)},
    streaming=True,
    remote=Remote.ALLOWED,
)
FAIL = OpSpec("fail", {"typed": Field(bool)}, remote=Remote.ALLOWED)
FAIL_NOW = OpSpec("fail_now", {"typed": Field(bool)}, remote=Remote.ALLOWED)
BIG = OpSpec("big", {"size": Field(int, min=0, max=1 << 22)}, remote=Remote.ALLOWED)
OPS = (ECHO, ECHO_ASYNC, SLOW, STREAM, FAIL, FAIL_NOW, BIG)


class Refused(HermesError):
    code = "refused_on_purpose"


def build_service(address: str, lock: Path, **options: Any) -> Service:
    service = Service("echo", address, lock_path=lock, **options)

    @service.handles(ECHO)
    def echo(call: Call) -> str:
        return call.args["text"]

    @service.handles(ECHO_ASYNC)
    async def echo_async(call: Call) -> str:
        return call.args["text"]

    @service.handles(SLOW)
    async def slow(call: Call) -> float:
        await trio.sleep(call.args["seconds"])
        return call.args["seconds"]

    @service.handles(STREAM)
    async def count(call: Call) -> int:
        for i in range(call.args["to"]):
            await call.emit({"n": i})
            if call.args.get("pause"):
                await trio.sleep(call.args["pause"])
        return call.args["to"]

    @service.handles(FAIL)
    async def fail(call: Call) -> None:
        if call.args["typed"]:
            raise Refused("refused, as asked", detail={"why": "test"})
        raise RuntimeError("a bug in a handler")

    @service.handles(FAIL_NOW)
    def fail_now(call: Call) -> None:
        if call.args["typed"]:
            raise Refused("refused at once, as asked", detail={"why": "test"})
        raise RuntimeError("a bug in an inline handler")

    @service.handles(BIG)
    def big(call: Call) -> bytes:
        return b"x" * call.args["size"]

    return service


async def main(address: str, lock: Path) -> None:
    service = build_service(address, lock)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.serve)
        print(f"ready {__import__('os').getpid()}", flush=True)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                service.stop(grace=2.0)
                break


if __name__ == "__main__":
    trio.run(main, sys.argv[1], Path(sys.argv[2]))
