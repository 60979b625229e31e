"""The operator plugin's tools as the e2e tests drive them: a ``Toolbox`` over a real simulator,
every answer parsed, and every error code any test saw collected, so one test can prove the
whole closed set of codes is reachable."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.operator import protocol as p
from tests.support.git_repos import make_repo
from tests.support.processes import python_env
from tests.support.session_daemon import SessionDaemon, start_reporter

PRODUCED: set[str] = set()
# Codes the simulator never answers through the plugin's checked calls; the unit tests of the
# daemon-answer mapping produce each of them.
MAPPING_ONLY = frozenset(
    {"runtime_not_installed", "runtime_incompatible", "session_input_rejected", "idempotency_conflict"}
)
CHANGES = p.MUTATIONS | {p.SESSION_NEW.name}


@dataclass
class Sim:
    daemon: SessionDaemon
    root: Path  # the Hermes home its chats run in
    repo: Path  # the project ``web``
    directory: Path

    @property
    def address(self) -> str:
        return self.daemon.address

    def start(self, name: str, agent: str = "shell", **extra: Any) -> dict[str, Any]:
        """A session started straight through the daemon, not the tools."""
        return self.daemon.call(p.SESSION_NEW, {"host": "local", "agent": agent, "name": name, **extra})


@contextmanager
def simulator(*args: str, projects: tuple[str, ...] = ("web",), reporter: bool = True) -> Iterator[Sim]:
    """A simulator (with a hook reporter) in a private short directory, and a git project
    under each label in ``projects``, all the same repository."""
    from hermes_cli.commands.mesh import ON_DEMAND_WORKERS
    from shared.spawn import stop_service

    directory = Path(tempfile.mkdtemp(prefix="hm-"))
    root = directory / "home"
    root.mkdir()
    repo = make_repo(directory / "repo")
    extra = [arg for label in projects for arg in ("--project", f"{label}={repo}")]
    daemon = SessionDaemon(directory, "--work-dir", str(root), *extra, *args, env=python_env(HERMES_HOME=str(root)))
    try:
        if reporter:
            start_reporter(root, daemon.address)
        yield Sim(daemon, root, repo, directory)
    finally:
        daemon.stop()
        for worker in ON_DEMAND_WORKERS:
            stop_service(root, worker)
        shutil.rmtree(directory, ignore_errors=True)
