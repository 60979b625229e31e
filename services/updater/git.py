"""The one way the updater runs git: a bounded subprocess, and ``GitFailed`` when it goes wrong.

Every git command runs as ``git -C repo ...`` in a session of its own (no terminal for ssh
to prompt on, and one process group that is killed whole on timeout: git leaves ssh,
upload-pack or git-remote-https children that a plain kill would orphan), with no stdin,
``GIT_TERMINAL_PROMPT=0`` and ``LC_ALL=C`` (stable stderr for the errors we report), and
without inherited variables that would point git at another repository. Read-only callers
pass ``read_only=True`` so that ``GIT_OPTIONAL_LOCKS=0`` keeps ``git status`` from
refreshing the index behind their back.

A failure — a non-zero exit the caller did not accept, a timeout, or a spawn failure — is
raised as ``GitFailed`` tagged with the caller's ``stage``. Secrets (a URL's userinfo and query
values above all) are hidden from both the command and git's output before either reaches the
error.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Container, Sequence
from pathlib import Path
from typing import Any

from services.updater.errors import UpdateError
from shared.redaction import redact_text

STDERR_TAIL_CHARS = 2000
# How long one git command of the apply stage may take (a fetch over a slow link included).
APPLY_TIMEOUT = 120.0

# Inherited variables that would point git at another repository, e.g. when the updater
# is started from a git hook.
_REPO_ENV = frozenset(
    {
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_COMMON_DIR",
        "GIT_NAMESPACE",
    }
)


class GitFailed(UpdateError):
    """A git command failed: ``.stage`` is the caller's stage of the command that failed."""

    code = "git_failed"

    def __init__(
        self,
        stage: str,
        argv: Sequence[str],
        returncode: int | None,
        output: str,
        *,
        timeout: float | None = None,
    ) -> None:
        # Redact before cutting the tail: a cut through a URL would hide it from the pattern.
        tail = redact_text(output)[-STDERR_TAIL_CHARS:]
        last_line = next((line.strip() for line in reversed(tail.splitlines()) if line.strip()), "")
        why = f"timed out after {timeout:g}s" if timeout is not None else f"exit {returncode}"
        command = [redact_text(arg) for arg in argv]
        verb = command[3] if len(command) > 3 else "git"  # argv is ["git", "-C", repo, verb, ...]
        message = f"git {verb} failed at stage {stage} ({why})" + (f": {last_line}" if last_line else "")
        detail: dict[str, Any] = {
            "stage": stage,
            "command": command,
            "returncode": returncode,
            "stderr": tail,
            "timed_out": timeout is not None,
        }
        if timeout is not None:
            detail["timeout"] = timeout
        super().__init__(message, detail=detail)
        self.stage = stage
        self.argv = command
        self.returncode = returncode
        self.stderr = tail
        self.timeout = timeout

    @property
    def timed_out(self) -> bool:
        return self.timeout is not None


def git_env(*, read_only: bool = False) -> dict[str, str]:
    """The environment of every git command: ours, minus the repository pointers."""
    env = {k: v for k, v in os.environ.items() if k not in _REPO_ENV}
    env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    if read_only:
        env["GIT_OPTIONAL_LOCKS"] = "0"  # `git status` must not rewrite the index
    return env


def run(
    repo: Path | str,
    args: Sequence[str],
    *,
    stage: str,
    timeout: float,
    ok: Container[int] = (0,),
    read_only: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``git -C repo args``, bounded by ``timeout``; an exit code outside ``ok``, a timeout or a
    spawn failure raises ``GitFailed`` carrying ``stage``."""
    argv = ["git", "-C", str(repo), *args]
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=git_env(read_only=read_only),
            start_new_session=True,
        )
    except OSError as exc:
        raise GitFailed(stage, argv, None, str(exc)) from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        _, err = proc.communicate()
        # from None: TimeoutExpired's own text carries the unredacted argv.
        raise GitFailed(stage, argv, None, _text(err), timeout=timeout) from None
    except BaseException:
        _kill_group(proc)
        proc.wait()
        raise
    if proc.returncode not in ok:
        raise GitFailed(stage, argv, proc.returncode, _text(err) if err.strip() else _text(out))
    return subprocess.CompletedProcess(argv, proc.returncode, _data(out), _data(err))


def _data(raw: bytes | None) -> str:
    """Output to parse: undecodable bytes (a path's) survive the round trip."""
    return (raw or b"").decode("utf-8", "surrogateescape")


def _text(raw: bytes | None) -> str:
    """Output to show: always printable."""
    return (raw or b"").decode("utf-8", "replace")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
