"""The CLI's crash-free guarantee: every command of the parser, found by walking the parser
itself (so a new command is covered by being added), run as a real process on a fresh home,
on a home with a live mesh, and with stdout a closed pipe, in text and in ``--json``. None
may print a traceback or die of a signal; into a closed pipe none may print a word about it.

Each run is bounded: a command still running after ``BOUND`` seconds (the foreground gateway,
the demo) is sent SIGTERM and checked all the same. Every command runs on an install's own
code (a clone), so ``hermes update`` updates that clone, never this checkout; ``auth`` reaches
a closed local port; unit files go to a private ``$HOME``. Nothing is left running: every
home's mesh and workers are stopped, and any process still on the test's directory is killed
and fails the test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from fleet.cli_grammar import build_top_level_parser
from fleet.supervisors import supervisord as sv
from shared.spawn import stop_workers
from tests.support.cli import DASHED_PUBLIC_KEY, HERMES
from tests.support.installs import Install

pytestmark = pytest.mark.slow

# A plausible value for each required argument, by its name; choices take their first. "ares"
# is a built-in skin and the live mesh's profile, so ``skin set`` and ``profile`` go all the way.
VALUES = {
    "name": "ares",
    "key": DASHED_PUBLIC_KEY,
    "plugin_dir": "ares",
    "archive": "ares",
    "catalog": "ares",
    "package_id": "ares",
    # No such profile: a rename of the live mesh's own would pull it from under the others.
    "old_name": "nobody",
    "new_name": "renamed",
    "identifier": "ares",
    "source": "ares",  # no such keys document
    "host": "ares",
    "service": "gateway",
    "to": "/proc/ares",  # a store no one can write: the export fails with its typed error
}
BOUND = 20.0  # seconds a run may take before it is sent SIGTERM
# Seconds it then has to end: bounded by the longest clean-up, the demo's (it may wait a minute
# for its update to stop, then brings the mesh down), not by a typical one. A command that ends
# sooner is not waited for.
GRACE = 90.0
THREADS = 6
# Run after the others on the live mesh, which they need up.
ENDS_THE_MESH = frozenset({"mesh down"})


def commands(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[str, list[str], argparse.ArgumentParser]]:
    """(``command_words``, argv, parser) of every command under ``parser``, its required
    arguments filled."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*words, name))
    command = parser.get_default("command_words")
    if command and command == " ".join(words):
        yield command, [*words, *_required(parser)], parser


def _required(parser: argparse.ArgumentParser) -> list[str]:
    argv: list[str] = []
    for action in parser._actions:
        positional = not action.option_strings
        if isinstance(action, argparse._SubParsersAction) or not (positional or action.required):
            continue
        if positional and action.nargs in ("?", "*"):
            continue
        if action.choices:
            value = str(next(iter(action.choices)))
        else:
            assert action.dest in VALUES, f"no value for {action.dest!r} of {parser.prog}: add one to VALUES"
            value = VALUES[action.dest]
        argv += [value] if positional else [action.option_strings[-1], value]
    return argv


def runs() -> list[tuple[str, list[str]]]:
    """Every command in text and, where it takes the flag, in ``--json``."""
    found = []
    for command, argv, parser in commands(build_top_level_parser()):
        found.append((command, argv))
        if "--json" in parser._option_string_actions:
            found.append((command, [*argv, "--json"]))
    return found


@dataclass
class Outcome:
    argv: list[str]
    home: Path
    code: int | None
    stdout: str
    stderr: str
    terminated: bool  # it was still running after BOUND and was sent SIGTERM

    def problems(self, *, closed_stdout: bool) -> list[str]:
        found = []
        where = f"hermes {' '.join(self.argv)} (HERMES_HOME={self.home})"
        if "Traceback" in self.stdout + self.stderr:
            found.append(f"{where} printed a traceback:\n{(self.stdout + self.stderr)[-3000:]}")
        if self.code is None:
            found.append(f"{where} did not end {GRACE:g}s after SIGTERM")
        elif self.code < 0 and not (self.terminated and self.code == -signal.SIGTERM):
            found.append(f"{where} died of signal {-self.code}")
        if closed_stdout and ("broken pipe" in self.stderr.lower() or "BrokenPipe" in self.stderr):
            found.append(f"{where} spoke of the closed pipe: {self.stderr[-500:]!r}")
        return found


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again at once: nothing listens there


def run(install: Install, env: dict[str, str], argv: list[str], home: Path, *, closed_stdout: bool) -> Outcome:
    stdout = subprocess.PIPE
    if closed_stdout:
        read_end, stdout = os.pipe()
        os.close(read_end)  # nobody reads: the first write fails with EPIPE
    proc = subprocess.Popen(
        [*HERMES, *argv],
        cwd=install.path,
        env={**env, "HERMES_HOME": str(home)},
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    if closed_stdout:
        os.close(stdout)
    terminated = False
    try:
        out, err = proc.communicate(timeout=BOUND)
    except subprocess.TimeoutExpired:
        terminated = True
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            return Outcome(argv, home, None, out or "", err or "", terminated)
    finally:
        _kill_group(proc.pid)  # what it left in its own session, not what it started detached
    return Outcome(argv, home, proc.returncode, out or "", err or "", terminated)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def stop_everything(homes: list[Path]) -> None:
    for home in homes:
        try:
            sv.down(home)
        except Exception:  # a home a command left half made: what runs there is swept below
            pass
        try:
            stop_workers(home)
        except Exception:
            pass


def leftovers(base: Path) -> list[psutil.Process]:
    """Live processes of the test's directory: started in it, or with a home or argv in it."""
    found = []
    mine = os.getpid()
    for process in psutil.process_iter(["pid", "cwd", "cmdline", "status"]):
        if process.info["pid"] == mine or process.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            environ = process.environ()
        except (psutil.Error, OSError):
            environ = {}
        texts = [process.info["cwd"] or "", *(process.info["cmdline"] or []), *environ.values()]
        if any(str(base) in text for text in texts):
            found.append(process)
    return found


@dataclass
class Everything:
    outcomes: dict[str, list[Outcome]]  # by kind of home: "fresh", "live", "pipe"
    left: list[str]  # what was still running on the test's directory once all was stopped


@pytest.fixture(scope="module")
def every_run() -> Iterator[Everything]:
    base = Path(tempfile.mkdtemp(prefix="hm-every-"))
    homes: list[Path] = []
    try:
        install = Install(base / "i")
        env = _environment(install, base)
        live = install.root
        homes.append(live)
        (live / "profiles" / VALUES["name"]).mkdir(parents=True)
        up = install.hermes("mesh", "up", timeout=120)
        assert up.returncode == 0, up.stdout + up.stderr
        outcomes = _run_all(install, env, live, homes, base)
        stop_everything(homes)
        left = [f"{p.pid}: {' '.join(p.info['cmdline'] or [])}" for p in _kill(leftovers(base))]
        yield Everything(outcomes, left)
    finally:
        stop_everything(homes)
        _kill(leftovers(base))
        shutil.rmtree(base, ignore_errors=True)


def _environment(install: Install, base: Path) -> dict[str, str]:
    for name in ("user", "tmp"):
        (base / name).mkdir()
    env = install.env(
        HOME=str(base / "user"),  # unit files and launchd plists land here, never in the real ones
        XDG_CONFIG_HOME=str(base / "user" / ".config"),
        TMPDIR=str(base / "tmp"),  # the demo builds its install here
        HERMES_PORTAL_URL=f"http://127.0.0.1:{closed_port()}",
        BROWSER="true",
    )
    for name in ("HERMES_DEBUG", "XDG_RUNTIME_DIR", "HERMES_LOG_LEVEL"):
        env.pop(name, None)
    return env


def _run_all(
    install: Install, env: dict[str, str], live: Path, homes: list[Path], base: Path
) -> dict[str, list[Outcome]]:
    every = runs()

    def fresh(kind: str, index: int) -> Path:
        home = base / f"{kind}{index}" / "home"  # not made: as ~/.hermes is not for a new user
        homes.append(home)
        return home

    with ThreadPoolExecutor(THREADS) as pool:
        fresh_runs = [
            pool.submit(run, install, env, a, fresh("f", i), closed_stdout=False) for i, (_, a) in enumerate(every)
        ]
        piped = [pool.submit(run, install, env, a, fresh("p", i), closed_stdout=True) for i, (_, a) in enumerate(every)]
        on_live = [
            pool.submit(run, install, env, a, live, closed_stdout=False) for c, a in every if c not in ENDS_THE_MESH
        ]
        live_outcomes = [f.result() for f in on_live]
        live_outcomes += [run(install, env, a, live, closed_stdout=False) for c, a in every if c in ENDS_THE_MESH]
        return {
            "fresh": [f.result() for f in fresh_runs],
            "pipe": [f.result() for f in piped],
            "live": live_outcomes,
        }


def _kill(processes: list[psutil.Process]) -> list[psutil.Process]:
    for process in processes:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(processes, timeout=10)
    return processes


def test_the_walk_finds_every_command():
    from hermes_cli.commands import TARGETS

    assert {command for command, _, _ in commands(build_top_level_parser())} == set(TARGETS)


@pytest.mark.parametrize("kind", ["fresh", "live", "pipe"])
def test_no_command_prints_a_traceback_or_dies_of_a_signal(every_run, kind):
    outcomes = every_run.outcomes[kind]
    assert len(outcomes) == len(runs())
    problems = [p for o in outcomes for p in o.problems(closed_stdout=kind == "pipe")]
    assert not problems, f"{len(problems)} problems:\n\n" + "\n\n".join(problems)


def test_nothing_is_left_running(every_run):
    assert every_run.left == [], "\n".join(every_run.left)
