"""The live fleet view (``hermes mesh top``) in a real terminal: a gateway killed with SIGKILL
shows ``down``, and its restart ``running`` again with its new pid, each within a second of
the event, from the gateways' own sockets; ``--json`` gives the same as lines; without a
terminal the view says what to do instead."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time

import pytest

from shared.gateways import ops
from shared.restart_storm import MAX_STARTS
from shared.transport import NO_RETRY, connect
from tests.support.cli import HERMES, hermes
from tests.support.processes import ROOT, GatewayProcess, python_env, read_state, wait_for
from tests.support.terminal import TMUX, Terminal, row_of

ROUNDS = 10  # a kill and a restart each: 20 events
SEEN_WITHIN = 1.0  # the done-when's bound, on the 95th percentile of the events
LOOK_EVERY = 0.01
GIVE_UP = 30.0  # a loose bound on one event: far beyond a second, far below the test's time


def _looked(terminal: Terminal, profile: str, pred) -> list[str]:
    deadline = time.monotonic() + GIVE_UP
    while time.monotonic() < deadline:
        row = row_of(terminal.screen(), profile)
        if row is not None and pred(row):
            return row
        time.sleep(LOOK_EVERY)
    pytest.fail(f"the view never showed {profile} as expected: {terminal.screen()}\n{terminal.stderr()}")


def _p95(values: list[float]) -> float:
    return sorted(values)[math.ceil(0.95 * len(values)) - 1]


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed")
def test_a_killed_gateway_shows_down_and_its_restart_running_within_a_second(root, short_dir, gateways):
    # The kills go round three profiles: each gateway starts at most MAX_STARTS times in the
    # storm breaker's window, so none of its starts is held back.
    victims = ("coder", "critic", "writer")
    assert 1 + math.ceil(ROUNDS / len(victims)) <= MAX_STARTS
    for name in victims:
        (root / "profiles" / name).mkdir(parents=True)
    default = gateways(root, "default")
    live = {name: gateways(root, name) for name in victims}
    started: list[GatewayProcess] = []
    terminal = Terminal(
        [*HERMES, "mesh", "top"], env=python_env(HERMES_HOME=str(root)), cwd=ROOT, record=short_dir / "top"
    )
    try:
        for name, gateway in live.items():
            _looked(terminal, name, lambda row, pid=gateway.pid: row[2:4] == [str(pid), "running"])
        assert row_of(terminal.screen(), "default")[2:4] == [str(default.pid), "running"]
        down, up = [], []
        for round_ in range(ROUNDS):
            name = victims[round_ % len(victims)]
            os.kill(live[name].pid, signal.SIGKILL)
            killed = time.monotonic()
            _looked(terminal, name, lambda row: row[2:4] == ["-", "down"])
            down.append(time.monotonic() - killed)
            live[name].proc.wait(timeout=10)

            gateway = live[name] = GatewayProcess(root, name)
            started.append(gateway)
            running_at = seen_at = None
            deadline = time.monotonic() + GIVE_UP
            while (running_at is None or seen_at is None) and time.monotonic() < deadline:
                now = time.monotonic()
                state = read_state(gateway.home) or {}
                if running_at is None and state.get("pid") == gateway.pid and state.get("gateway_state") == "running":
                    running_at = now
                row = row_of(terminal.screen(), name)
                if seen_at is None and row is not None and row[2:4] == [str(gateway.pid), "running"]:
                    seen_at = now
                time.sleep(LOOK_EVERY)
            assert running_at is not None and seen_at is not None, (terminal.screen(), read_state(gateway.home))
            up.append(max(0.0, seen_at - running_at))
        assert row_of(terminal.screen(), "default")[2:4] == [str(default.pid), "running"]  # untouched
        for index, name in enumerate(victims):  # each start after a kill is a restart, in the last hour
            restarts = len(range(index, ROUNDS, len(victims)))
            _looked(terminal, name, lambda row, n=restarts: row[9] == str(n))
        print(f"down seen after: p95 {_p95(down):.3f} s, max {max(down):.3f} s")
        print(f"up seen after:   p95 {_p95(up):.3f} s, max {max(up):.3f} s")
        assert _p95(down + up) <= SEEN_WITHIN, (down, up)
        terminal.send("q")
        wait_for(lambda: terminal.exit_code() is not None, timeout=GIVE_UP, what="the view to end on q")
        assert terminal.exit_code() == 0, terminal.stderr()
        assert "Traceback" not in terminal.stderr()
    finally:
        terminal.close()
        for gateway in started:
            gateway.kill()


def test_json_lines_follow_a_kill_and_a_restart_and_an_interrupt_ends_them_cleanly(root, gateways):
    gateway = gateways(root, "default")
    view = subprocess.Popen(
        [*HERMES, "mesh", "top", "--json"],
        cwd=ROOT,
        env=python_env(HERMES_HOME=str(root)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert view.stdout is not None
    again = None
    try:

        def next_row(pred) -> dict:
            deadline = time.monotonic() + GIVE_UP
            while time.monotonic() < deadline:
                line = json.loads(view.stdout.readline())
                if line["type"] == "gateway" and pred(line):
                    return line
            pytest.fail("no such line")

        first = next_row(lambda r: r["state"] == "running")
        assert (first["profile"], first["pid"], first["host"], first["code"]) == (
            "default",
            gateway.pid,
            "local",
            "current",
        )
        with connect(gateway.endpoint, retry=NO_RETRY) as client:  # a turn: its event carries its time
            client.call(ops.TURN, {"text": "hi", "seconds": 0.2}, timeout=GIVE_UP)
        timed = next_row(lambda r: r["last_turn_seconds"] is not None)
        assert timed["pid"] == gateway.pid and 0.2 <= timed["last_turn_seconds"] < GIVE_UP
        os.kill(gateway.pid, signal.SIGKILL)
        assert next_row(lambda r: r["state"] == "down")["pid"] is None
        gateway.proc.wait(timeout=10)
        again = GatewayProcess(root, "default")
        assert next_row(lambda r: r["state"] == "running")["pid"] == again.pid
        view.send_signal(signal.SIGINT)
        assert view.wait(timeout=GIVE_UP) == 0
        assert "Traceback" not in view.stderr.read()
    finally:
        view.kill()
        view.wait(timeout=10)
        if again is not None:
            again.kill()


def test_without_a_terminal_the_view_says_to_ask_for_json_lines(root):
    done = hermes("mesh", "top", home=root)
    assert done.returncode != 0
    assert "--json" in done.stderr and "Traceback" not in done.stderr
    watched = hermes("gateway", "status", "--watch", home=root)
    assert watched.returncode == done.returncode and watched.stderr == done.stderr
