"""One way to run the ``hermes`` CLI: as a real process (``hermes``), or in this process
(``hermes_in_process``) with the same output, for a test that has no process to start."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from tests.support.processes import ROOT, python_env

HERMES = (sys.executable, "-m", "hermes_cli.main")  # the argv of ``hermes``, before its arguments
# A real CURVE public key (made by zmq.curve_keypair) that starts with "-", as one in 85 does:
# the parser must take it as the key, not as an option.
DASHED_PUBLIC_KEY = "-9:atZ#@^H1bQ?!NtjJq8G%q.UO=COFAB%KnB[.H"


def hermes(
    *args: str,
    home: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    env_extra: Mapping[str, str] | None = None,
    cwd: Path = ROOT,
    stdin: int | IO[Any] | None = subprocess.DEVNULL,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """``hermes ARGS`` in ``cwd``: its exit code, stdout and stderr, as text.

    The environment is ``env`` (default: this process's, running this checkout), with
    ``HERMES_HOME`` set to ``home`` when given and ``env_extra`` on top. Standard input is
    ``stdin`` (default: nothing, never the test runner's own).
    """
    environment = dict(python_env() if env is None else env)
    if home is not None:
        environment["HERMES_HOME"] = str(home)
    environment.update(env_extra or {})
    return subprocess.run(
        [*HERMES, *args],
        cwd=cwd,
        env=environment,
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def hermes_in_process(
    *args: str,
    home: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    env_extra: Mapping[str, str] | None = None,
    cwd: Path = ROOT,
) -> subprocess.CompletedProcess[str]:
    """``hermes ARGS`` run by ``hermes_cli.main.main`` in this process, as ``hermes`` runs it
    (the same environment, working directory, and nothing on standard input): its exit code,
    stdout and stderr. The process's environment, working directory and standard streams are
    its own again afterwards."""
    environment = dict(python_env() if env is None else env)
    if home is not None:
        environment["HERMES_HOME"] = str(home)
    environment.update(env_extra or {})
    from hermes_cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with (
        _environment(environment),
        contextlib.chdir(cwd),
        open(os.devnull) as nothing,
        _stdin(nothing),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            code = main(list(args))
        except SystemExit as ended:  # the parser answered (--help), as the interpreter exits
            code = ended.code if isinstance(ended.code, int) else 0 if ended.code is None else 1
    return subprocess.CompletedProcess([*HERMES, *args], code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def _environment(environment: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(environment)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _stdin(stream: IO[str]) -> Iterator[None]:
    saved, sys.stdin = sys.stdin, stream
    try:
        yield
    finally:
        sys.stdin = saved


def hermes_json(
    *args: str, run: Callable[..., subprocess.CompletedProcess[str]] = hermes, **options: Any
) -> tuple[int, Any]:
    """``hermes ARGS --json`` (the options are ``hermes``'s), run by ``run``: its exit code and document."""
    done = run(*args, "--json", **options)
    try:
        return done.returncode, json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(
            f"hermes {' '.join(args)} --json printed no document: {done.stdout!r} {done.stderr!r}"
        ) from None
