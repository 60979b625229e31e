"""``hermes mesh metrics`` against real gateways under the embedded supervisord, read back by a
real OpenMetrics parser (``prometheus_client``'s): turns move the latency histogram and the
active turns, a gateway killed and restarted by its supervisor moves its restarts and comes
back up, and the listener serves the same over real HTTP, and only on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from fleet.supervisors import supervisord as sv
from shared import homes
from shared.gateways import ops
from shared.transport.sync_client import connect
from tests.support import mesh_roots, processes
from tests.support.cli import HERMES, hermes
from tests.support.processes import python_env

pytestmark = pytest.mark.slow

WAIT = 30.0


@pytest.fixture
def mesh() -> Iterator[Path]:
    with mesh_roots.mesh_root("a", "b") as root:
        sv.up(root, ["a", "b"])
        for profile in ("a", "b"):
            processes.wait_for(lambda p=profile: up(metrics(root), p), timeout=WAIT, what=f"gateway {profile} up")
        yield root


def metrics(root: Path) -> dict[tuple[str, tuple], float]:
    """(sample name, its labels) -> value, as the parser reads ``hermes mesh metrics``."""
    run = hermes("mesh", "metrics", home=root)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    return samples(run.stdout)


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def of(got: dict, name: str, **labels: str) -> float | None:
    return got.get((name, tuple(sorted(labels.items()))))


def metrics_when(root: Path, name: str, wanted: float, what: str) -> dict:
    """The first metrics in which gateway a's ``name`` is ``wanted``."""

    def seen() -> dict | None:
        got = metrics(root)
        return got if of(got, name, profile="a") == wanted else None

    return processes.wait_for(seen, timeout=WAIT, interval=0.2, what=what)


def up(got: dict, profile: str) -> bool:
    return of(got, "hermes_gateway_up", profile=profile) == 1


def turn(root: Path, profile: str, seconds: float = 0.0) -> dict:
    endpoint = homes.endpoint(homes.profile_home(profile, root), ops.SERVICE, create=False)
    with connect(endpoint) as client:
        return client.call(ops.TURN, {"text": "hi", "seconds": seconds}, timeout=seconds + 10)


def test_metrics_move_with_turns_and_a_restart_by_the_supervisor(mesh):
    before = metrics(mesh)
    assert of(before, "hermes_gateway_current_code", profile="a") == 1
    assert of(before, "hermes_gateway_restarts_total", profile="a") == 0
    count = of(before, "hermes_gateway_turn_duration_seconds_count", profile="a")
    assert count == 0 and of(before, "hermes_gateway_active_turns", profile="a") == 0

    for _ in range(3):
        turn(mesh, "a", 0.01)
    after = metrics(mesh)
    assert of(after, "hermes_gateway_turn_duration_seconds_count", profile="a") == 3
    assert of(after, "hermes_gateway_turn_duration_seconds_bucket", profile="a", le="+Inf") == 3
    assert of(after, "hermes_gateway_turn_duration_seconds_sum", profile="a") >= 0.03
    assert of(after, "hermes_gateway_turn_duration_seconds_count", profile="b") == 0  # b took none

    # A turn in flight is an active turn.
    outcome: list[object] = []
    slow = threading.Thread(target=lambda: outcome.append(_try(lambda: turn(mesh, "a", 20.0))), daemon=True)
    slow.start()
    busy = metrics_when(mesh, "hermes_gateway_active_turns", 1, "the slow turn to be in flight")
    assert of(busy, "hermes_gateway_turn_duration_seconds_count", profile="a") == 3  # not finished yet

    # Killed, and started again by supervisord: down for a moment, then up, one restart more.
    old = sv.status(mesh).program(sv.unit_name("a")).pid
    os.kill(old, signal.SIGKILL)
    slow.join(timeout=WAIT)
    assert not slow.is_alive() and outcome and isinstance(outcome[0], Exception)  # its caller heard
    again = metrics_when(mesh, "hermes_gateway_restarts_total", 1, "the restarted gateway a to count its restart")
    assert up(again, "a") and up(again, "b")
    assert of(again, "hermes_gateway_restarts_last_hour", profile="a") == 1
    assert of(again, "hermes_gateway_restarts_total", profile="b") == 0
    # A new process: its turns start over, none in flight.
    assert of(again, "hermes_gateway_turn_duration_seconds_count", profile="a") == 0
    assert of(again, "hermes_gateway_active_turns", profile="a") == 0

    as_json = json.loads(hermes("mesh", "metrics", "--json", home=mesh).stdout)
    a = next(g for g in as_json["gateways"] if g["profile"] == "a")
    assert a["up"] and a["restarts"] == {"total": 1, "last_hour": 1}


def _try(call):
    try:
        return call()
    except Exception as exc:  # the gateway died under it
        return exc


def test_the_listener_serves_the_same_over_http_and_stops_cleanly(mesh):
    listener = subprocess.Popen(
        [*HERMES, "mesh", "metrics", "--listen", "127.0.0.1:0"],
        env={**python_env(), "HERMES_HOME": str(mesh)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = processes.wait_for(lambda: listener.stderr.readline() or None, timeout=WAIT, what="the address")
        url = line.split(" at ", 1)[1].strip()
        with urllib.request.urlopen(url, timeout=WAIT) as answer:
            assert answer.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
            got = samples(answer.read().decode())
        assert up(got, "a") and up(got, "b")
        head = urllib.request.Request(url, method="HEAD")
        with urllib.request.urlopen(head, timeout=WAIT) as answer:
            assert answer.status == 200 and answer.read() == b""
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(url.replace("/metrics", "/other"), timeout=WAIT)
        assert missing.value.code == 404
        listener.send_signal(signal.SIGTERM)
        assert listener.wait(timeout=WAIT) == 0
        assert "Traceback" not in listener.stderr.read()
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait(timeout=WAIT)


def test_a_listener_on_an_address_other_hosts_could_reach_is_refused_typed(tmp_path):
    run = hermes("mesh", "metrics", "--listen", "0.0.0.0:9464", "--json", home=tmp_path / "home")
    assert run.returncode != 0
    error = json.loads(run.stdout)["error"]
    assert error["code"] == "metrics_listen_not_loopback" and error["detail"]["field"] == "listen"
