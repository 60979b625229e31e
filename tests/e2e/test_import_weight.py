"""What a command's start-up imports: each light path, run as a fresh process, loads nothing
heavier than it needs (the CLI's light commands, resolving the root home, the updater's face)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.processes import ROOT, python_env

WATCHED = ("asyncio", "trio", "zmq", "zmq.utils.monitor", "argparse", "psutil", "fleet.cli_grammar")


def imported_by(argv: list[str], home) -> set[str]:
    """Which of ``WATCHED`` one ``hermes ARGV`` run, in a fresh process, has imported."""
    program = (
        "import json, sys; from hermes_cli.main import main\n"
        "try: main(sys.argv[2:])\n"
        "except SystemExit: pass\n"
        "print(json.dumps([m for m in json.loads(sys.argv[1]) if m in sys.modules]), file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, json.dumps(WATCHED), *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=python_env(HERMES_HOME=str(home)),
        timeout=60,
    )
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def test_version_is_answered_before_any_parser_or_client_is_loaded(root):
    assert imported_by(["--version"], root) == set()


# Standard modules a bare interpreter does not load and ``hermes --version`` can do without:
# its answer and the owed-restart check are a few file reads with ``os``.
AVOIDABLE = ("json", "re", "pathlib", "typing", "enum", "signal", "select", "importlib", "collections")


def test_version_imports_nothing_a_bare_interpreter_does_not_have(root):
    program = (
        "import sys; from hermes_cli.main import main\n"
        "try: main(['--version'])\n"
        "except SystemExit: pass\n"
        "print('LOADED', *sorted(m for m in sys.argv[1:] if m in sys.modules), file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, *AVOIDABLE],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=python_env(HERMES_HOME=str(root)),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Hermes Agent v")
    assert done.stderr.strip().splitlines()[-1] == "LOADED"


@pytest.mark.parametrize(
    "argv",
    [
        ["gateway", "status", "--json"],
        ["gateway", "list"],
        ["gateway", "drain", "--deadline", "1"],
        ["profile", "list"],
        ["skin", "list"],
        ["mesh", "status"],
        ["logs", "update"],
        ["update", "--check"],
        ["operator", "doctor"],
    ],
)
def test_no_command_line_path_starts_an_event_loop_library(root, argv):
    loaded = imported_by(argv, root)
    assert "trio" not in loaded
    # pyzmq's monitor helper pulls in asyncio; the blocking client is to read monitor events
    # without it, and once it does the asyncio import must be gone with it.
    assert "asyncio" not in loaded or "zmq.utils.monitor" in loaded


# What a status the gateways' sockets answer does without: pyzmq (the ZMTP client asks over
# ipc), logging (only a service or a failure logs), the random and hash modules (only writers
# make temp names and ids; os.urandom makes the request ids), the supervisors (only the scan
# tells which one runs a process), shutil (argparse's width for a help nobody asked for),
# dataclasses (it imports inspect: a sixth of the command's time; its records are NamedTuples),
# the update's settings (read only where config.yaml names the health window).
NOT_FOR_STATUS = (
    "zmq",
    "logging",
    "secrets",
    "hashlib",
    "random",
    "fleet.supervisors",
    "shutil",
    "dataclasses",
    "services.updater.settings",  # the face loads it on first use
)


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "table"])
def test_gateway_status_over_ipc_loads_neither_pyzmq_nor_what_only_services_and_writers_need(root, gateways, as_json):
    (root / "profiles" / "coder").mkdir(parents=True)
    started = {gateways(root, "default").pid, gateways(root, "coder").pid}
    argv = ["gateway", "status", "--json"] if as_json else ["gateway", "status"]
    program = (
        "import json, sys; from hermes_cli.main import main\n"
        f"try: main({argv!r})\n"
        "except SystemExit: pass\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'zmq' or m in sys.argv[1:])), "
        "file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, *NOT_FOR_STATUS],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=python_env(HERMES_HOME=str(root)),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    if as_json:
        listed = json.loads(done.stdout)["gateways"]
        assert {(g["pid"], g["source"]) for g in listed} == {(pid, "socket") for pid in started}
    else:  # the table, drawn in the skin's colours: one row per gateway, each by its socket
        rows = [line.split() for line in done.stdout.splitlines()[1 : 1 + len(started)]]
        assert {(row[1], int(row[2]), row[-1]) for row in rows} == {("local", pid, "socket") for pid in started}
    assert json.loads(done.stderr.strip().splitlines()[-1]) == []


def test_light_commands_import_no_heavy_dependencies(root):
    program = (
        "import sys; from hermes_cli.main import main\n"
        "for argv in (['--version'], ['profile', 'list', '--json']):\n"
        "    try: main(argv)\n"
        "    except SystemExit: pass\n"
        "print('HEAVY', sorted(m for m in ('trio', 'zmq', 'httpx', 'rich', 'msgpack') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT, env=python_env(HERMES_HOME=str(root))
    )
    assert "HEAVY []" in result.stdout, result.stdout + result.stderr


def test_resolving_the_root_imports_nothing_heavy():
    program = (
        "import json, sys; from shared import home_env; home_env.root_home(); "
        "print(json.dumps(sorted(m for m in ('dataclasses', 'hashlib', 'shared.homes') if m in sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT, env=python_env(), timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_importing_the_face_loads_only_the_obligations():
    program = (
        "import json, sys; import services.updater; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('services.', 'shared.')) "
        "or m in ('trio', 'zmq', 'httpx', 'psutil', 'dataclasses'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT, env=python_env(), timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        "services.updater",
        "services.updater.obligations",
        "shared.home_env",
    ]


# What only some runs need: the archive fallback (httpx), the migrations (ruamel), a dependency
# sync (importlib.metadata, urllib.request), a process's ancestry off Linux (psutil).
ON_DEMAND = ("httpx", "ruamel", "ruamel.yaml", "importlib.metadata", "urllib.request", "psutil")


def _loaded_after_importing(module: str, watched: tuple[str, ...]) -> list[str]:
    program = (
        f"import json, sys; import {module}; "
        f"print(json.dumps(sorted(m for m in {list(watched)!r} if m in sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT, env=python_env(), timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_updater_answers_before_its_pipeline_is_imported():
    # The entry's control socket (what `hermes logs update --follow` talks to) needs trio and
    # the transport; the pipeline's modules are imported once it answers.
    assert _loaded_after_importing("services.updater.run", ("services.updater.pipeline", *ON_DEMAND)) == []


@pytest.mark.parametrize(
    "module", ["services.updater.pipeline", "services.updater.completion", "services.updater.completion_child"]
)
def test_the_update_path_imports_what_only_some_runs_need_when_they_need_it(module):
    assert _loaded_after_importing(module, ON_DEMAND) == []


def test_reading_the_update_settings_parses_only_a_config_that_names_them(tmp_path):
    (tmp_path / "config.yaml").write_text("config_version: 1\nmodel: x\n")
    program = (
        "import json, sys; from pathlib import Path; from services.updater.settings import load_settings; "
        "settings = load_settings(Path(sys.argv[1])); "
        "print(json.dumps([settings.branch, 'ruamel' in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=python_env(),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [None, False]
