"""What one more host costs a home that sees many, and what each service of a host costs.

Starts ``--hosts`` "hosts" on this machine, each a separate install whose gateway binds its own
CURVE TCP port on loopback (a remote host's gateway, reached as one: its own keys, its own
heartbeats, a CURVE handshake per connection), and on the first host also the auth worker, the
handoff retry worker and the hook reporter. Then, in the same run:

- per service: the time from its process start to its first answered ``hello`` over CURVE, and
  its memory once serving (RSS, and USS: what the process alone holds, from ``smaps``);
- one home imports the hosts one by one (``hermes mesh keys import --host``, the host having
  authorized the home's client key) and times ``hermes gateway status --json`` with 0 hosts
  and with each count of ``--steps``: medians of ``--samples`` runs, and the cost per host;
- the fleet view (``hermes mesh top --json``) watching all the hosts: its share of one core over
  ``--seconds``, against the same view with no host, and its RSS.

Every figure is measured in the run that prints it; the host count is loopback, so a real
network adds its round trip to each status (all hosts are asked at once: one round trip, not
one per host).

    .venv/bin/python bench/fleet_hosts.py [--hosts 20] [--steps 1,5,10,20] [--samples 5] [--seconds 15] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from shared.mesh_tcp import TCP_ENV  # noqa: E402
from shared.transport import curve_keys  # noqa: E402
from tests.support.tcp import free_port_pair  # noqa: E402

HERMES = str(ROOT / ".venv" / "bin" / "hermes")
SERVICES = {
    "gateway": "services.gateway",
    "auth_worker": "services.auth_worker",
    "handoff_retry": "services.handoff_retry",
    "hook_reporter": "services.hook_reporter",
}
START_TIMEOUT = 60.0
CALL_TIMEOUT = 30.0


def env_of(home: Path, tcp: dict[str, int] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env |= {"HERMES_HOME": str(home), "HERMES_LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT)}
    if tcp:
        env[TCP_ENV] = ",".join(f"{name}=tcp://127.0.0.1:{port}" for name, port in tcp.items())
    return env


class Host:
    def __init__(self, base: Path, index: int, services: tuple[str, ...]):
        self.name = f"h{index}"
        self.home = base / self.name
        self.ports = {name: free_port_pair() for name in services}
        curve_keys.init(self.home, list(services))
        self.processes: dict[str, subprocess.Popen] = {}
        self.started: dict[str, float] = {}

    def start(self) -> None:
        for name, module in ((n, SERVICES[n]) for n in self.ports):
            self.started[name] = time.monotonic()
            self.processes[name] = subprocess.Popen(
                [sys.executable, "-m", module],
                cwd=ROOT,
                env=env_of(self.home, self.ports),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )

    def serving_after(self, name: str) -> float:
        """Seconds from the start of service ``name`` to its first answered hello."""
        from shared import homes
        from shared.protocol import HELLO
        from shared.transport.call_rules import NO_RETRY
        from shared.transport.sync_client import connect

        os.environ[TCP_ENV] = env_of(self.home, self.ports)[TCP_ENV]
        endpoint = homes.endpoint(self.home, name, create=False)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            try:
                with connect(endpoint, retry=NO_RETRY) as client:
                    client.call(HELLO, timeout=0.2)
                return time.monotonic() - self.started[name]
            except Exception:  # not serving yet: asked again
                time.sleep(0.01)
        raise SystemExit(f"{name} of {self.name} did not answer within {START_TIMEOUT}s")

    def keys_document(self) -> str:
        done = subprocess.run(
            [HERMES, "mesh", "keys", "show", "--json"],
            env=env_of(self.home, self.ports),
            capture_output=True,
            text=True,
            check=True,
            timeout=CALL_TIMEOUT,
        )
        return done.stdout

    def stop(self) -> None:
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.processes.values():
            try:
                proc.wait(timeout=START_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def memory_mib(pid: int) -> dict[str, float]:
    info = psutil.Process(pid).memory_full_info()
    return {"rss": round(info.rss / 2**20, 1), "uss": round(info.uss / 2**20, 1)}


def hermes(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [HERMES, *args], env=env_of(home), capture_output=True, text=True, timeout=CALL_TIMEOUT, check=False
    )


def status_seconds(home: Path, samples: int, expect: int) -> float:
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        done = hermes(home, "gateway", "status", "--json")
        times.append(time.perf_counter() - started)
        rows = json.loads(done.stdout)["gateways"]
        running = [r for r in rows if r.get("host") and r["state"] == "running"]
        if len(running) != expect:
            raise SystemExit(f"status listed {len(running)} running host gateways, not {expect}: {rows}")
    return statistics.median(times)


def view_cpu(home: Path, seconds: float) -> dict[str, float]:
    proc = subprocess.Popen(
        [HERMES, "mesh", "top", "--json"], env=env_of(home), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        time.sleep(3.0)  # its connections made and first rows drawn
        view = psutil.Process(proc.pid)
        before, at = sum(view.cpu_times()[:2]), time.monotonic()
        time.sleep(seconds)
        used, wall = sum(view.cpu_times()[:2]) - before, time.monotonic() - at
        return {"core_percent": round(100 * used / wall, 2), "rss_mib": round(view.memory_info().rss / 2**20, 1)}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=START_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run(count: int, steps: list[int], samples: int, seconds: float) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="hm-bench-hosts-"))
    hosts = [Host(base, i, tuple(SERVICES) if i == 0 else ("gateway",)) for i in range(count)]
    home = base / "home"
    try:
        hosts[0].start()  # alone: its start is not slowed by the other hosts' starts
        services = {name: {"serving_s": round(hosts[0].serving_after(name), 3)} for name in SERVICES}
        for host in hosts[1:]:
            host.start()
        for host in hosts[1:]:
            host.serving_after("gateway")
        time.sleep(1.0)  # past start-up's own allocations
        for name, proc in hosts[0].processes.items():
            services[name] |= memory_mib(proc.pid)
        hermes(home, "mesh", "keys", "init").check_returncode()
        client = hermes(home, "mesh", "keys", "show", "--client").stdout.strip()
        status = {0: status_seconds(home, samples, 0)}
        idle_view = view_cpu(home, seconds)
        for index, host in enumerate(hosts, start=1):
            curve_keys.add_public(host.home, "authorized", "home", client)
            document = base / f"{host.name}.json"
            document.write_text(host.keys_document())
            done = hermes(home, "mesh", "keys", "import", "--host", host.name, "--address", "127.0.0.1", str(document))
            done.check_returncode()
            if index in steps:
                status[index] = status_seconds(home, samples, index)
        full_view = view_cpu(home, seconds)
        # The first host costs what any TCP use costs a status (pyzmq, the config parsed, CURVE
        # handshakes); each one after it, what its own answer adds.
        first_host = status[min(status.keys() - {0})] - status[0]
        per_host_status = (status[count] - status[min(status.keys() - {0})]) / max(1, count - min(status.keys() - {0}))
        per_host_view = (full_view["core_percent"] - idle_view["core_percent"]) / count
        return {
            "services": services,
            "status_s": {str(k): round(v, 3) for k, v in status.items()},
            "status_first_host_ms": round(first_host * 1000, 1),
            "status_per_host_ms": round(per_host_status * 1000, 2),
            "view_no_host": idle_view,
            "view_all_hosts": full_view,
            "view_per_host_core_percent": round(per_host_view, 3),
            "hosts": count,
        }
    finally:
        for host in hosts:
            host.stop()
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--steps", default="1,5,10,20")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    steps = sorted({int(s) for s in args.steps.split(",") if s and int(s) <= args.hosts} | {args.hosts})
    result = run(args.hosts, steps, args.samples, args.seconds)
    if args.json:
        print(json.dumps(result))
        return
    print("per service (first host):")
    for name, figures in result["services"].items():
        print(
            f"  {name:<14} serving after {figures['serving_s']:.3f}s  RSS {figures['rss']} MiB  USS {figures['uss']} MiB"
        )
    print("hermes gateway status --json (median):")
    for count, seconds in result["status_s"].items():
        print(f"  {count:>3} hosts: {seconds * 1000:.0f} ms")
    print(
        f"  the first host adds {result['status_first_host_ms']} ms, each one after it {result['status_per_host_ms']} ms"
    )
    print(
        f"fleet view: {result['view_no_host']['core_percent']} % of a core with no host, "
        f"{result['view_all_hosts']['core_percent']} % with {result['hosts']} "
        f"({result['view_per_host_core_percent']} % per host), RSS {result['view_all_hosts']['rss_mib']} MiB"
    )


if __name__ == "__main__":
    main()
