"""The one warning line every ``hermes`` command prints while a fleet restart is owed, from a
real command that may open no socket and import nothing heavy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from services.updater import obligations
from tests.support.processes import ROOT, python_env
from tests.support.updater import NEW, owe

# --- the CLI ------------------------------------------------------------------------------------

# Every command, run with the network and the process table forbidden and nothing heavy
# importable: the warning must still appear, from one file read.
CHEAP_CHECK = """
import json, socket, sys
class Forbidden:
    def __init__(self, *a, **k): raise AssertionError("the owed-restart check opened a socket")
socket.socket = Forbidden
sys.modules["psutil"] = None  # importing it raises
from hermes_cli.main import main
argv = json.loads(sys.argv[1])
try:
    code = main(argv)
except SystemExit as exc:
    code = exc.code
heavy = sorted(m for m in ("trio", "zmq", "msgpack", "psutil", "shared.files", "shared.homes") if sys.modules.get(m))
print(json.dumps({"code": code, "heavy": heavy}), file=sys.stderr)
"""


def run_cli(root: Path, *argv: str) -> tuple[subprocess.CompletedProcess, dict]:
    done = subprocess.run(
        [sys.executable, "-c", CHEAP_CHECK, json.dumps(argv)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=python_env(HERMES_HOME=str(root)),
        timeout=60,
    )
    *lines, last = done.stderr.strip().splitlines()
    return done, {**json.loads(last), "warnings": [line for line in lines if line.startswith("⚠")]}


def test_the_warning_is_one_cheap_line_on_stderr_and_json_stays_valid(short_dir):
    root = short_dir / "hermes"
    owe(root, coder=obligations.STALE, writer=obligations.NOT_RESTARTED)
    line = "⚠ 2 gateways still run old code (coder, writer): run `hermes update`"

    version, report = run_cli(root, "--version")
    assert version.stdout.startswith("Hermes Agent v") and report["code"] == 0
    assert report["warnings"] == [line]
    assert report["heavy"] == []  # not even the shared modules that cost startup time

    listed, report = run_cli(root, "profile", "list", "--json")
    assert json.loads(listed.stdout)["root"] == str(root)  # stdout is the document alone
    assert (report["code"], report["warnings"]) == (0, [line])
    assert not {"trio", "zmq", "psutil"} & set(report["heavy"])

    _, report = run_cli(root, "frobnicate")  # a usage error still warns
    assert (report["code"], report["warnings"]) == (2, [line])

    obligations.clear_gateway(root, "coder", NEW)
    obligations.clear_gateway(root, "writer", NEW)
    _, report = run_cli(root, "--version")
    assert report["warnings"] == []
