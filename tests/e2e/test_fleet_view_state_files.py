"""The fleet view shows a gateway of the Hermes Agent, which has no control socket of ours and
is known by its ``gateway_state.json`` alone, as ``hermes gateway status`` does: ``running``
while the process its record names lives, ``down`` once it has exited."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

from tests.support.cli import hermes_json
from tests.support.gateway_states import REAL_RECORD
from tests.support.view_lines import GIVE_UP, next_row, start_view

# A gateway as the Hermes Agent runs it (a ``gateway/run.py``), writing its record as the
# Hermes Agent's writer does (the fields of a record that writer wrote), then waiting, alive,
# until its stdin closes. Run isolated (-I): nothing of this checkout in it.
WRITER = """
import json, os, sys
record = json.loads(sys.argv[1])
stat = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
record.update(pid=os.getpid(), start_time=int(stat[19]), argv=[sys.argv[0]])
path = sys.argv[2]
with open(path + ".tmp", "w") as out:
    json.dump(record, out)
os.replace(path + ".tmp", path)
print("ready", flush=True)
sys.stdin.read()
"""


def _agent_gateway(home, workdir) -> subprocess.Popen[str]:
    script = workdir / "gateway" / "run.py"
    script.parent.mkdir(parents=True)
    script.write_text(WRITER)
    proc = subprocess.Popen(
        [sys.executable, "-I", str(script), REAL_RECORD.read_text(), str(home / "gateway_state.json")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def test_a_hermes_agent_gateway_known_by_its_state_file_shows_running_then_down(root, short_dir):
    home = root / "profiles" / "coder"
    home.mkdir(parents=True)
    agent = _agent_gateway(home, short_dir)
    view = None
    try:
        code, status = hermes_json("gateway", "status", home=root)
        assert code == 0, status
        assert [(g["profile"], g["pid"], g["state"], g["source"]) for g in status["gateways"]] == [
            ("coder", agent.pid, "running", "state_file")
        ]
        view = start_view(root)
        shown = next_row(view, lambda r: r["profile"] == "coder" and r["state"] == "running")
        assert (shown["pid"], shown["host"], shown["active_turns"]) == (agent.pid, "local", 2)
        assert shown["health"]["state"] == "unknown" and "state file" in shown["health"]["why"]

        agent.communicate(timeout=30)  # its stdin closes: it exits, its record still says running
        assert json.loads((home / "gateway_state.json").read_text())["gateway_state"] == "running"
        gone = next_row(view, lambda r: r["profile"] == "coder" and r["state"] != "running")
        assert (gone["state"], gone["pid"]) == ("down", None)
        view.send_signal(signal.SIGINT)
        assert view.wait(timeout=GIVE_UP) == 0
        assert view.stderr is not None and b"Traceback" not in view.stderr.read()
    finally:
        agent.kill()
        agent.wait(timeout=10)
        if view is not None:
            view.kill()
            view.wait(timeout=10)
