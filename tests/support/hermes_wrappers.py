"""A ``hermes`` executable the installer's ``--hermes-bin`` can name, made for one test.

The installer runs the probe in the Python beside the executable, so the wrapper sits in a
directory shaped like a virtual environment (``bin/hermes``, ``bin/python3``, ``pyvenv.cfg``,
``lib``) whose Python is the given environment's, with its packages. The wrapper is a real
file (never a link), private to its owner, and runs the given shell text with the arguments.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

from tests.support import real_hermes

VERSION_LINE = "Hermes Agent v0.20.0 (2026.8.3)"


def wrapper(directory: Path, venv: Path, body: str) -> Path:
    """``directory/bin/hermes`` running ``body`` (``/bin/sh``), beside ``venv``'s Python."""
    (directory / "bin").mkdir(parents=True)
    shutil.copyfile(venv / "pyvenv.cfg", directory / "pyvenv.cfg")
    (directory / "lib").symlink_to(venv / "lib")
    (directory / "bin" / "python3").symlink_to(os.path.realpath(venv / "bin" / "python3"))
    path = directory / "bin" / "hermes"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o700)
    return path


def answering_version(directory: Path, venv: Path, real: Path, line: str | None = VERSION_LINE) -> Path:
    """A wrapper that answers ``--version`` with ``line`` (None: the real one's) and hands
    everything else to ``real``, offline: in a network namespace of its own, as every real
    Hermes run here is."""
    prefix = real_hermes.offline_prefix()
    offline = shlex.join([shutil.which(prefix[0]) or prefix[0], *prefix[1:], str(real)])
    answer = "" if line is None else f'if [ "$1" = --version ]; then printf "%s\\n" {shlex.quote(line)}; exit 0; fi\n'
    return wrapper(directory, venv, f'{answer}exec {offline} "$@"')


# A Hermes that answers the installer's four commands in the real shapes, its enablement kept in
# a file outside the home. Each piece can be replaced to make it misbehave.
SPEAKING = {
    "version": f"printf '%s\\n' {shlex.quote(VERSION_LINE)}",
    "list": (
        'if [ -f "$HERMES_HOME/plugins/operators/pohunek/plugin.yaml" ] || [ -f "$HERMES_HOME/plugins/pohunek/plugin.yaml" ]; '
        'then printf \'[{"name":"bundled-one","status":"not enabled","source":"bundled"},'
        '{"name":"pohunek","status":"%s","source":"user"}]\\n\' "$(cat "$STATE" 2>/dev/null || echo not enabled)"; '
        "else echo '[]'; fi"
    ),
    "enable": 'echo enabled > "$STATE"',
    "disable": 'echo disabled > "$STATE"',
}


def speaking(directory: Path, venv: Path, state: Path, **pieces: str) -> Path:
    """A wrapper that speaks the real shapes (``SPEAKING``, with ``pieces`` replacing any),
    keeping whether the plugin is enabled in ``state``; anything else exits 2."""
    parts = {**SPEAKING, **pieces}
    return wrapper(
        directory,
        venv,
        f"STATE={shlex.quote(str(state))}\n"
        'case "$*" in\n'
        f'"--version") {parts["version"]};;\n'
        f'"plugins list --json") {parts["list"]};;\n'
        f'"plugins enable pohunek --no-allow-tool-override") {parts["enable"]};;\n'
        f'"plugins disable pohunek") {parts["disable"]};;\n'
        "*) exit 2;;\nesac",
    )
