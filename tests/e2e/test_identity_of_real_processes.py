"""Process identities and command lines of real children: alive, a zombie, dead, and a comm
with spaces and parentheses."""

from __future__ import annotations

import json
import os
import re
import site
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from fleet import discovery
from fleet.command_lines import (
    holder_subcommand,
    looks_like_gateway_command_line,
)
from shared.identity import current_identity, is_alive, process_identity, read_cmdline
from tests.support.processes import ROOT, python_env

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
SLEEPER = [sys.executable, "-c", "import time; time.sleep(30)"]


@pytest.fixture
def child():
    proc = subprocess.Popen(SLEEPER)
    yield proc
    proc.kill()
    proc.wait()


def _wait_for_exec(pid: int, argv: list[str]) -> None:
    """Popen can return while the child is still inside execve, before its new argv is visible."""
    deadline = time.monotonic() + 10
    while read_cmdline(pid) != argv:
        assert time.monotonic() < deadline, f"child never showed argv {argv}: {read_cmdline(pid)}"
        time.sleep(0.01)


def _wait_for_zombie(pid: int) -> None:
    deadline = time.monotonic() + 10
    while psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "child never became a zombie"
        time.sleep(0.01)


def test_child_identity_lives_and_dies_with_the_child(identity_backend):
    proc = subprocess.Popen(SLEEPER)
    try:
        ident = process_identity(proc.pid)
        assert ident is not None and ident.pid == proc.pid
        assert ident != current_identity()
        assert is_alive(ident)
        _wait_for_exec(proc.pid, SLEEPER)
        assert process_identity(proc.pid) == ident  # exec keeps the identity
    finally:
        proc.kill()
        proc.wait()
    assert not is_alive(ident)
    assert process_identity(proc.pid) != ident  # gone, or a different process reusing the pid


def test_zombie_is_not_alive(identity_backend, child):
    ident = process_identity(child.pid)
    assert ident is not None
    child.kill()
    _wait_for_zombie(child.pid)
    assert not is_alive(ident)


@linux_only
def test_start_time_parses_past_a_comm_with_spaces_and_parentheses(tmp_path):
    link = tmp_path / "x) 1 2 (z"  # the kernel takes comm from the exec'd file name
    link.symlink_to(sys.executable)
    proc = subprocess.Popen([str(link), *SLEEPER[1:]])
    try:
        _wait_for_exec(proc.pid, [str(link), *SLEEPER[1:]])
        comm = Path(f"/proc/{proc.pid}/comm").read_text().rstrip("\n")
        assert comm == "x) 1 2 (z"
        stat = Path(f"/proc/{proc.pid}/stat").read_text()
        # A greedy group runs to the last ')', independently of the module's parse.
        match = re.fullmatch(r"\d+ \((.*)\) (.*)", stat.strip(), re.DOTALL)
        assert match and match.group(1) == comm
        expected = int(match.group(2).split()[19])
        assert stat.split()[21] != str(expected)  # a naive split really would read the wrong field

        ident = process_identity(proc.pid)
        assert ident is not None and ident.start_time == expected
        from_psutil = (psutil.Process(proc.pid).create_time() - psutil.boot_time()) * os.sysconf("SC_CLK_TCK")
        assert abs(from_psutil - expected) <= 1
        assert is_alive(ident)
    finally:
        proc.kill()
        proc.wait()


def test_real_child_command_line_is_classified(child):
    _wait_for_exec(child.pid, SLEEPER)
    assert holder_subcommand(read_cmdline(child.pid)) is None  # `python -c ...` is never Hermes


@pytest.mark.parametrize("module", ["hermes_cli.main", "hermes_cli"])
def test_a_python_m_line_is_hermes_exactly_when_it_runs_hermes(root, module):
    argv = [sys.executable, "-m", module, "profile", "list", "--json"]
    done = subprocess.run(argv, cwd=ROOT, env=python_env(HERMES_HOME=str(root)), capture_output=True, text=True)
    ran = done.returncode == 0 and json.loads(done.stdout)["active"] == "default"
    assert ran == (module == "hermes_cli.main"), done.stderr  # the package itself has no __main__
    assert holder_subcommand(argv) == ("profile" if ran else None)


@linux_only
@pytest.mark.parametrize("name", ["python3.13t", "python3.14t", "python3t"])
def test_a_gateway_run_by_a_free_threaded_interpreter_is_found_by_the_scan(root, short_dir, gateways, name):
    # The kernel takes the command line from the name the interpreter is run by: a link of that
    # name to this interpreter is what a free-threaded build looks like to the scan.
    bin_dir = short_dir / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).symlink_to(sys.executable)
    env = python_env()  # this venv's packages, which the link (outside the venv) does not see
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], *site.getsitepackages()])
    gateway = gateways(root, python=str(bin_dir / name), env=env)
    argv = read_cmdline(gateway.pid)
    assert argv[:3] == [str(bin_dir / name), "-m", "services.gateway"]
    assert looks_like_gateway_command_line(argv)
    assert [(r.pid, r.profile) for r in discovery.scan_gateways(root)] == [(gateway.pid, "default")]
