"""The demo's operator daemon: the simulator the demo mesh's hooks report to.

The demo runs its mesh as if inside a managed session, so its gateways report their turns'
activity through the hook reporter to this daemon, and the demo shows what arrived.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from hermes_cli.commands import demo_child
from shared.errors import HermesError
from shared.spawn import end_child

SESSION = "demo-session"


class OperatorDaemon:
    def __init__(self, install: Path, env: dict[str, str], address: str, packages: Path):
        self.address = address
        # Its hermes sessions launch from the selected runtime package of the demo's integration.
        argv = [sys.executable, "-m", "simulators.operator_sim", address, "--packages", str(packages)]
        self.proc, line = demo_child.start(argv, install, env)
        if not line.startswith("ready"):
            self.stop()
            raise HermesError("the operator daemon simulator did not start")

    def env(self) -> dict[str, str]:
        """What makes the demo's processes report to this daemon."""
        from shared.hooks import SESSION_ENV
        from shared.operator.protocol import ENDPOINT_ENV

        return {SESSION_ENV: SESSION, ENDPOINT_ENV: self.address}

    def summary(self) -> dict[str, int]:
        """The reports received, counted by kind and state ("activity:working": 3)."""
        from shared.operator.client import DaemonClient
        from simulators.operator_sim import ops

        with DaemonClient(self.address) as client:
            records = client.call(ops.SIM_RECORDS, timeout=10)["records"]
        return dict(Counter(f"{r['kind']}:{r.get('state') or r.get('reason') or ''}".rstrip(":") for r in records))

    def stop(self) -> None:
        end_child(self.proc)
