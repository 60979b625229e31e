"""Patches a test applies to a release's source in the dev clone before it is pushed."""

from __future__ import annotations

import re
from pathlib import Path

COMPLETION = Path("services") / "updater" / "completion.py"


def patch_release(path: Path, anchor: str, replacement: str) -> None:
    """Replace ``anchor``, which must appear exactly once, in a release's source file: a patch
    whose anchor moved fails here instead of quietly testing an unpatched release."""
    text = path.read_text()
    assert text.count(anchor) == 1, f"{path} holds {text.count(anchor)} copies of the patch anchor {anchor!r}"
    path.write_text(text.replace(anchor, replacement))


def before_completion_runs(dev: Path, code: str) -> None:
    """A release whose completion runs ``code`` (indented lines; ``request`` is in scope) first."""
    run = "    result = Completion(request).run()\n"
    patch_release(dev / COMPLETION, run, code + run)


def mark_completion(dev: Path) -> None:
    """A release whose completion says so in its result: proof it ran from the new tree."""
    pid = '"pid": me.pid,'
    patch_release(dev / COMPLETION, pid, '"marker": "new-tree", ' + pid)


def hold_completion(dev: Path) -> None:
    """A release whose completion waits while ``<root>/hold-completion`` exists, saying so in
    ``<root>/completion-holding``: a test acts mid-update, after the commit point, at a known moment."""
    before_completion_runs(
        dev,
        (
            "    import time\n"
            "    (Path(request.root) / 'completion-holding').touch()\n"
            "    while (Path(request.root) / 'hold-completion').exists():\n"
            "        time.sleep(0.05)\n"
        ),
    )


def bump_version(dev: Path) -> str:
    """A release with a new version string; returns it."""
    path = dev / "shared" / "version.py"
    found = re.search(r'^__version__ = "([^"]+)"$', path.read_text(), re.MULTILINE)
    assert found, f"{path} sets no __version__"
    old = found.group(1)
    patch_release(path, f'__version__ = "{old}"', f'__version__ = "{old}.post1"')
    return f"{old}.post1"
