"""A real terminal for a test: a command run in a tmux pane of a tmux server of its own, read
back with ``capture-pane`` as a person would see it, and keys sent to it."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

TMUX = shutil.which("tmux")


class Terminal:
    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        record: Path,
        width: int = 160,
        height: int = 40,
        prefix: Sequence[str] = (),
    ):
        """Run ``argv`` in a ``width`` × ``height`` pane; its exit code and stderr go to ``record``
        (``.rc`` and ``.err`` beside it) once it ends. ``prefix`` runs tmux itself under
        another command (a network namespace's ``ip netns exec``)."""
        assert TMUX is not None
        self.socket = f"hm-{uuid.uuid4().hex[:12]}"
        self.record = record
        self._tmux = [*prefix, TMUX, "-L", self.socket, "-f", "/dev/null"]
        command = f"{shlex.join(argv)} 2> {shlex.quote(str(record))}.err; echo $? > {shlex.quote(str(record))}.rc"
        subprocess.run(  # the server, started here, gives the pane this environment
            [*self._tmux, "new-session", "-d", "-x", str(width), "-y", str(height), "-c", str(cwd), command],
            env={**env, "TERM": "xterm-256color"},
            check=True,
            timeout=30,
        )

    def screen(self) -> list[str]:
        done = subprocess.run([*self._tmux, "capture-pane", "-p"], capture_output=True, text=True, timeout=30)
        return done.stdout.splitlines()

    def send(self, *keys: str) -> None:
        subprocess.run([*self._tmux, "send-keys", *keys], check=True, timeout=30)

    def exit_code(self) -> int | None:
        path = Path(f"{self.record}.rc")
        return int(path.read_text()) if path.exists() and path.read_text().strip() else None

    def stderr(self) -> str:
        path = Path(f"{self.record}.err")
        return path.read_text() if path.exists() else ""

    def close(self) -> None:
        subprocess.run([*self._tmux, "kill-server"], capture_output=True, timeout=30)


def row_of(screen: Sequence[str], first: str) -> list[str] | None:
    """The words of the screen's table row whose first word is ``first``."""
    for line in screen:
        words = line.split()
        if words and words[0] == first:
            return words
    return None
