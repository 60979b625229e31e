"""The fleet view's own cost: how much of one core ``hermes mesh top`` takes while it watches
20 gateways on two "hosts" (10 on this host's ipc sockets, 10 on TCP with CURVE, reached as a
remote host's are: own heartbeats, CURVE handshakes), with turns flowing through them.

Starts the gateways in a throwaway install, then the view on a real terminal (a tmux pane, the
screen redrawn as a person sees it) and, in another run, as ``--json`` lines. After a warm-up
it reads the view process's CPU time (user + system, ``/proc/PID/stat``) over ``--seconds`` of
wall time while a turn goes to one gateway every ``--turn-every`` seconds (so events flow), and
its RSS at the end.

Target: at most 2 % of one core.

    .venv/bin/python bench/fleet_view.py [--gateways 20] [--seconds 30] [--turn-every 0.5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WARM_UP = 5.0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def the_view(pane_shell: int) -> int:
    """The ``hermes`` process under the pane's shell."""
    for _ in range(100):
        children = subprocess.run(["pgrep", "-P", str(pane_shell)], capture_output=True, text=True).stdout.split()
        if children:
            return int(children[0])
        time.sleep(0.05)
    raise SystemExit("the view did not start")


def measure(view_pid: int, clients: list, seconds: float, turn_every: float) -> dict[str, float]:
    from shared.gateways import ops

    time.sleep(WARM_UP)
    cpu0, wall0 = cpu_seconds(view_pid), time.monotonic()
    turns = 0
    while time.monotonic() - wall0 < seconds:
        random.choice(clients).call(ops.TURN, {"text": "bench"}, timeout=10)
        turns += 1
        time.sleep(turn_every)
    cpu, wall = cpu_seconds(view_pid) - cpu0, time.monotonic() - wall0
    return {
        "core_percent": round(100 * cpu / wall, 2),
        "cpu_s": round(cpu, 3),
        "wall_s": round(wall, 1),
        "turns": turns,
        "rss_mib": round(rss_mib(view_pid), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gateways", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--turn-every", type=float, default=0.5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from shared import homes
    from shared.mesh_tcp import TCP_ENV
    from shared.transport import NO_RETRY, connect
    from tests.support.cli import HERMES
    from tests.support.processes import GatewayProcess, python_env
    from tests.support.tcp import free_port_pair
    from tests.support.terminal import Terminal

    work = Path(tempfile.mkdtemp(prefix="hm-bench-"))
    root = work / "home"
    names = [f"p{i:02d}" for i in range(1, args.gateways + 1)]
    remote = names[len(names) // 2 :]
    for name in names:
        (root / "profiles" / name).mkdir(parents=True)
    ports: list[int] = []
    while len(ports) < len(remote):
        port = free_port_pair()
        if all(abs(port - taken) > 1 for taken in ports):
            ports.append(port)
    env = python_env(HERMES_HOME=str(root))
    env[TCP_ENV] = ",".join(f"gateway@{name}=tcp://127.0.0.1:{port}" for name, port in zip(remote, ports, strict=True))
    os.environ[TCP_ENV] = env[TCP_ENV]
    subprocess.run(
        [*HERMES, "mesh", "keys", "init", *(w for name in remote for w in ("--profile", name))],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    gateways: list[GatewayProcess] = []
    results: dict[str, dict[str, float]] = {}
    try:
        gateways = [GatewayProcess(root, name, env=dict(env)) for name in names]
        for gateway in gateways:
            gateway.wait_running()
        clients = [
            connect(homes.endpoint(homes.profile_home(n, root), "gateway", create=False), retry=NO_RETRY) for n in names
        ]

        terminal = Terminal([*HERMES, "mesh", "top"], env=env, cwd=ROOT, record=work / "top", height=args.gateways + 10)
        try:
            shell = int(
                subprocess.run([*terminal._tmux, "display", "-p", "#{pane_pid}"], capture_output=True, text=True).stdout
            )
            results["terminal"] = measure(the_view(shell), clients, args.seconds, args.turn_every)
        finally:
            terminal.close()

        view = subprocess.Popen([*HERMES, "mesh", "top", "--json"], env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
        try:
            results["json_lines"] = measure(view.pid, clients, args.seconds, args.turn_every)
        finally:
            view.kill()
            view.wait()
        for client in clients:
            client.close()
    finally:
        for gateway in gateways:
            gateway.kill()
        shutil.rmtree(work, ignore_errors=True)

    report = {"gateways": args.gateways, "hosts": 2, "target_core_percent": 2.0, **results}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{args.gateways} gateways on 2 hosts (ipc + CURVE TCP), a turn every {args.turn_every:g} s")
        for mode, r in results.items():
            print(
                f"  {mode:10}  {r['core_percent']:5.2f} % of one core ({r['cpu_s']} s CPU in {r['wall_s']} s, "
                f"{r['turns']} turns), RSS {r['rss_mib']} MiB  (target <= 2 %)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
