"""An update run's pipeline outside trio, for tests of what it writes and takes."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

from services.updater.pipeline import Pipeline


def bare_run(tmp_path: Path) -> Pipeline:
    """A run's pipeline with a begun receipt and a plan, outside trio: its events go nowhere."""
    root, install = tmp_path / "home", tmp_path / "install"
    root.mkdir(exist_ok=True)
    install.mkdir(exist_ok=True)
    lock = SimpleNamespace(recovered=None, fileno=lambda: -1)
    run = Pipeline(root, install, "u1", {}, lock, threading.Event(), lambda event: None)  # type: ignore[arg-type]
    run.receipt.set(
        "plan", {"install": {"kind": "git", "in_place": True}, "archive_url": "https://u:hunter2@x/{branch}"}
    )
    run.write()
    return run
