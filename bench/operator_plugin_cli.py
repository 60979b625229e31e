"""The operator plugin's two ways to its daemon: what a tool call costs through the operator
CLI (``hermes-operator``, one process per daemon call: how the plugin runs inside a Hermes
without this project's packages) against the same call in process over ZeroMQ (our own chat).

Everything runs in the same run on the same machine; only the ratios mean much. The CLI's
price is one process start per daemon call, so it is also set against the start of a bare
interpreter importing the same client (``python -c 'import shared.operator.tool_calls'``):

- ``pohunek_sessions`` (one daemon call, ``session.list``);
- ``pohunek_session_get`` (two: ``session.list`` resolves the reference, ``session.get`` reads).

    .venv/bin/python bench/operator_plugin_cli.py [--calls N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.session_daemon import median, timed  # noqa: E402
from shared.operator import protocol as p  # noqa: E402
from shared.operator.client import DaemonClient  # noqa: E402
from tests.support.operator_plugin import OPERATOR_CLI, payload, policy_fields, write_policy  # noqa: E402
from tests.support.operator_tools import policy  # noqa: E402

HOST = "local"
# A CLI call costs at most its process starts (one per daemon call) over the in-process call,
# with this margin for the answer's JSON both ways.
TARGET_START_RATIO = 1.5
CALLS = (("pohunek_sessions", {}, 1), ("pohunek_session_get", {"session": "bench"}, 2))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()
    tools, transport = payload("tools"), payload("transport")
    with tempfile.TemporaryDirectory(prefix="hm-bench-") as directory:
        home = Path(directory) / "home"
        home.mkdir()
        address = f"ipc://{directory}/daemon.ctl"
        env = {**os.environ, "HERMES_HOME": str(home), "PYTHONPATH": str(ROOT)}
        daemon = subprocess.Popen(
            [sys.executable, "-m", "simulators.operator_sim", address, "--work-dir", str(home)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert daemon.stdout is not None and daemon.stdout.readline().startswith(b"ready")
            policy_file = write_policy(
                Path(directory) / "policy" / "policy.json",
                policy_fields(address, access_mode="read_only", operator_cli=str(OPERATOR_CLI)),
            )
            direct = tools.Toolbox(policy(address, access_mode="read_only"), p.CLIENT_WINDOW, env={})
            cli = tools.Toolbox(
                policy(address, access_mode="read_only"),
                p.CLIENT_WINDOW,
                env={},
                transport=transport.Cli(str(OPERATOR_CLI), str(policy_file)),
            )

            def tool(box, name: str, arguments: dict) -> None:
                answer = json.loads(box.handler(name)(arguments))
                if not answer["ok"]:
                    raise SystemExit(f"{name} failed: {answer['error']['code']}")

            with DaemonClient(address) as client:
                client.call(p.SESSION_NEW, {"host": HOST, "agent": "shell", "name": "bench"})
            start = [sys.executable, "-c", "import shared.operator.tool_calls"]
            starts = timed(lambda: subprocess.run(start, cwd=ROOT, env=env, check=True), args.calls)
            rows = [
                (
                    name,
                    calls,
                    timed(lambda n=name, a=arguments: tool(direct, n, a), args.calls),
                    timed(lambda n=name, a=arguments: tool(cli, n, a), args.calls),
                )
                for name, arguments, calls in CALLS
            ]
        finally:
            daemon.terminate()
            daemon.wait(timeout=30)
    start_ms = median(starts) / 1e6
    print(f"a bare interpreter importing the client: p50 {start_ms:.1f} ms")
    print(f"{'tool':<22}{'daemon calls':>13}{'direct p50 ms':>15}{'CLI p50 ms':>12}{'ratio':>8}{'per start':>11}")
    worst = 0.0
    for name, calls, in_process, through_cli in rows:
        extra = (median(through_cli) - median(in_process)) / 1e6
        per_start = extra / calls / start_ms
        worst = max(worst, per_start)
        ratio = median(through_cli) / median(in_process)
        print(
            f"{name:<22}{calls:>13}{median(in_process) / 1e6:>15.2f}{median(through_cli) / 1e6:>12.1f}"
            f"{ratio:>8.0f}{per_start:>11.2f}"
        )
    ok = worst <= TARGET_START_RATIO
    print(
        f"target: a CLI daemon call costs at most {TARGET_START_RATIO}x a bare interpreter start over the"
        f" in-process call ({worst:.2f}x): {'met' if ok else 'NOT met'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
