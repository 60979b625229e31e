"""``python -m services.operator_sim ADDRESS``: accept hook reports on ADDRESS (ipc:// or tcp://),
record them, and be slow or failing on request. Prints ``ready <pid>`` once bound; stops on
SIGTERM/SIGINT.

It is a simulator because the real daemon is another product: it speaks the mesh protocol
with the reporter's ``report`` op, and adds ``records`` and ``configure`` for tests.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections import deque
from pathlib import Path
from typing import Any

import trio

from services.operator_sim.ops import CONFIGURE, RECORDS
from shared.errors import HermesError
from shared.operator_daemon import REPORT
from shared.service import Call, Service

MAX_RECORDS = 10_000


class Failing(HermesError):
    code = "daemon_failing"


class OperatorSim:
    def __init__(self, address: str, lock: Path | None):
        self.records: deque[dict[str, Any]] = deque(maxlen=MAX_RECORDS)
        self.delay = 0.0
        self.fail = 0  # answer this many reports with an error
        self.service = Service("operator_sim", address, lock_path=lock)
        self.service.add(REPORT, self._report)
        self.service.add(RECORDS, self._records)
        self.service.add(CONFIGURE, self._configure)

    async def _report(self, call: Call) -> dict[str, Any]:
        if self.delay:
            await trio.sleep(self.delay)
        if self.fail:
            self.fail -= 1
            raise Failing("the daemon is failing on purpose")
        self.records.append(call.args["report"])
        return {"ok": True}

    async def _records(self, call: Call) -> dict[str, Any]:
        return {"records": list(self.records)}

    async def _configure(self, call: Call) -> dict[str, Any]:
        self.delay = call.args.get("delay", self.delay)
        self.fail = call.args.get("fail", self.fail)
        return {"delay": self.delay, "fail": self.fail}

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.service.serve)
            print(f"ready {os.getpid()}", flush=True)
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    break
            self.service.stop(grace=0.5)
            nursery.cancel_scope.cancel()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.operator_sim", description=__doc__.splitlines()[0])
    parser.add_argument("address", help="where to accept reports: ipc://PATH or tcp://HOST:PORT")
    args = parser.parse_args(argv)
    lock = Path(args.address[len("ipc://") :] + ".lock") if args.address.startswith("ipc://") else None
    trio.run(OperatorSim(args.address, lock).run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
