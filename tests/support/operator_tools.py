"""The operator plugin's tools as the e2e tests drive them: a ``Toolbox`` over a real simulator,
every answer parsed, and every error code any test saw collected, so one test can prove the
whole closed set of codes is reachable."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.operator import protocol as p
from shared.operator.policy import Policy
from simulators.operator_sim.ops import SIM_COUNTERS
from tests.support.git_repos import make_repo
from tests.support.operator_plugin import OPERATOR_CLI, payload, policy_fields, write_policy
from tests.support.processes import python_env
from tests.support.session_daemon import SessionDaemon, start_reporter

PRODUCED: set[str] = set()
# Codes the simulator never answers through the plugin's checked calls; the unit tests of the
# daemon-answer mapping produce each of them.
MAPPING_ONLY = frozenset(
    {"runtime_not_installed", "runtime_incompatible", "session_input_rejected", "idempotency_conflict"}
)
CHANGES = p.MUTATIONS | {p.SESSION_NEW.name}


def policy(address: str, **overrides: Any) -> Policy:
    fields = policy_fields(address, **overrides)
    del fields["schema_version"]
    fields["allowed_hosts"] = tuple(fields["allowed_hosts"])
    return Policy(**fields)


class Tools:
    """``tools(name, args)`` → the parsed answer of one handler call; with ``policy_file``, a
    policy written there naming ``operator_cli``, and every call through that CLI."""

    def __init__(
        self,
        address: str,
        *,
        window: tuple[int, int] = (3, 4),
        env: dict[str, str] | None = None,
        policy_file: Path | None = None,
        operator_cli: Path = OPERATOR_CLI,
        **fields: Any,
    ):
        tools = payload("tools")
        transport = None
        if policy_file is not None:
            write_policy(policy_file, policy_fields(address, operator_cli=str(operator_cli), **fields))
            transport = payload("transport").Cli(str(operator_cli), str(policy_file))
        self.box = tools.Toolbox(policy(address, **fields), window, env=env or {}, transport=transport)

    def __call__(self, name: str, args: Any = None) -> dict[str, Any]:
        answer = json.loads(self.box.handler(name)({} if args is None else args))
        if not answer["ok"]:
            PRODUCED.add(answer["error"]["code"])
        return answer


def result(answer: dict[str, Any]) -> Any:
    assert answer["ok"], answer
    return answer["result"]


def code(answer: dict[str, Any]) -> str:
    assert not answer["ok"], answer
    return answer["error"]["code"]


def ops(daemon: SessionDaemon) -> dict[str, int]:
    return daemon.call(SIM_COUNTERS)["ops"]


def changes(daemon: SessionDaemon) -> int:
    """How many changing calls the daemon has received in all."""
    return sum(n for op, n in ops(daemon).items() if op in CHANGES)


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
    from tests.support.workers import stop_and_check_workers

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
        try:
            stop_and_check_workers(root)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
