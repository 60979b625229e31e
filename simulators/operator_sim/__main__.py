"""``python -m simulators.operator_sim ADDRESS [options]``: the operator session daemon simulator.

It stands in for the real operator daemon (a Rust program that cannot run here) and speaks
its public API as a mesh protocol in the window ``3..=4``: named hosts, sessions whose
runtimes are real children on real PTYs, retained output with decimal cursors, a rendered
screen, bounded waits, stop, resume and remove, the origin-session guard, idempotency keys,
and the lifecycle reports the hook reporter forwards. Prints ``ready <pid>`` once bound; stops
on SIGTERM/SIGINT, stopping every runtime first. With ``--state DIR`` a restarted simulator
keeps its sessions (their runtimes lost, to be resumed).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import signal
import sys
from pathlib import Path

import trio

from shared.errors import HermesError
from shared.operator.protocol import DAEMON_WINDOW
from simulators.operator_sim.app import SessionDaemonApp, daemon_id
from simulators.operator_sim.daemon import STOP_GRACE, Settings

RETAIN_DEFAULT = 256 * 1024
HOST_RE = re.compile(r"^(local|[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*)$")


def _window(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"([0-9]{1,3})\.\.=?([0-9]{1,3})", text)
    if not match or int(match[1]) > int(match[2]):
        raise argparse.ArgumentTypeError(f"{text!r} is not a window such as 3..4")
    return int(match[1]), int(match[2])


def _hosts(text: str) -> list[str]:
    hosts = text.split(",")
    bad = [h for h in hosts if not HOST_RE.fullmatch(h)]
    if bad or len(set(hosts)) != len(hosts):
        raise argparse.ArgumentTypeError(f"hosts must be distinct names (local or DNS labels): {text!r}")
    return hosts


def _project(text: str) -> tuple[str, Path]:
    label, sep, path = text.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", label) or not os.path.isabs(path):
        raise argparse.ArgumentTypeError(f"a project is LABEL=/absolute/path, got {text!r}")
    return label, Path(path)


def _default_hermes() -> str:
    beside = Path(sys.executable).parent / "hermes"
    return str(beside) if beside.exists() else shutil.which("hermes") or str(beside)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulators.operator_sim", description=__doc__.splitlines()[0])
    parser.add_argument("address", help="where to listen: ipc://PATH or tcp://HOST:PORT")
    parser.add_argument("--hosts", type=_hosts, default=["local"], help="the hosts it serves (comma list)")
    parser.add_argument("--state", type=Path, help="a directory that keeps the sessions across restarts")
    parser.add_argument("--window", type=_window, default=DAEMON_WINDOW, help="protocol versions answered, e.g. 4..4")
    parser.add_argument("--daemon-id", default=None, help="this daemon's id (default: a new one)")
    parser.add_argument("--retain-bytes", type=int, default=RETAIN_DEFAULT, help="output kept per runtime")
    parser.add_argument("--max-sessions", type=int, default=256, help="sessions a host may hold (1-4096)")
    parser.add_argument("--hermes-bin", default=None, help="the hermes entrypoint to launch")
    parser.add_argument("--work-dir", type=Path, default=None, help="where sessions without a project run")
    parser.add_argument("--project", type=_project, action="append", default=[], help="LABEL=/path/to/repo")
    parser.add_argument(
        "--packages", type=Path, default=None, help="launch hermes from the selected package of this integration state"
    )
    parser.add_argument("--hook-endpoint", default=None, help="the hook reporter intake its children report to")
    args = parser.parse_args(argv)
    if not 64 <= args.retain_bytes <= 64 << 20:
        parser.error("--retain-bytes must be between 64 and 67108864")
    if not 1 <= args.max_sessions <= 4096:
        parser.error("--max-sessions must be between 1 and 4096")
    identity = args.daemon_id or daemon_id()
    if not re.fullmatch(r"[A-Za-z0-9._:-]{1,128}", identity):
        parser.error("--daemon-id must be 1-128 of A-Z a-z 0-9 . _ : -")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.state is not None:
        args.state.mkdir(mode=0o700, parents=True, exist_ok=True)
    settings = Settings(
        hosts=args.hosts,
        daemon_id=identity,
        address=args.address,
        hermes_bin=args.hermes_bin or _default_hermes(),
        work_dir=(args.work_dir or Path.cwd()).resolve(),
        retain_bytes=args.retain_bytes,
        max_sessions=args.max_sessions,
        state_dir=args.state,
        hook_endpoint=args.hook_endpoint,
        packages=args.packages,
        projects=dict(args.project),
    )
    lock = Path(args.address[len("ipc://") :] + ".lock") if args.address.startswith("ipc://") else None
    try:
        app = SessionDaemonApp(settings, window=args.window, lock=lock)
        app.daemon.restore()
        trio.run(_serve, app)
    except HermesError as exc:
        print(f"operator_sim: {exc.message}", file=sys.stderr)
        return 2
    return 0


async def _serve(app: SessionDaemonApp) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(app.run)
        print(f"ready {os.getpid()}", flush=True)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                break
        with trio.move_on_after(STOP_GRACE + 5):
            await app.daemon.stop_all()
        app.service.stop(grace=0.5)
        with trio.move_on_after(5):
            await app.service.wait_stopped()
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    sys.exit(main())
