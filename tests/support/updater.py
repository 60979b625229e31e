"""The updater's records as tests make them: a begun receipt, an owed fleet, a completion
request and a bare run's pipeline, install-kind probes that find nothing, and a config file
an older release wrote."""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

from services.updater import obligations
from services.updater.completion_contract import Request, dependency_digest
from services.updater.install_kind import Probes
from services.updater.pipeline import Pipeline
from services.updater.receipt import Receipt
from shared.config import config_path
from shared.identity import ProcessIdentity, current_identity
from tests.support.processes import ROOT

# --- receipts ------------------------------------------------------------------------------------

T0 = datetime(2026, 8, 1, 12, 30, 45, tzinfo=UTC)


BEFORE = {"code_sha": "a" * 40, "code_version": "0.1.0"}


def begin(update_id: str = "u1", *, identity: ProcessIdentity | None = None, at: datetime = T0) -> Receipt:
    return Receipt.begin(update_id, ["hermes", "update"], identity or current_identity(), BEFORE, at=at)


# --- what a committed update owes ----------------------------------------------------------------

NEW = "b" * 40


def owe(root: Path, **states: str) -> None:
    obligations.replace_fleet(root, {p: obligations.owed_part(NEW, s, "why", "u1") for p, s in states.items()})


# --- the completion --------------------------------------------------------------------------------


def asking(**fields) -> Request:
    base = {"update_id": "u", "root": "/r", "install_root": "/i", "before": None, "after": None, "result_path": "/x"}
    return Request.new(**{**base, **fields})


def on_this_tree(tmp_path: Path, update_id: str = "u1") -> Request:
    """A completion's request for this checkout as the new tree, with a fresh home under
    ``tmp_path`` and the dependencies unchanged (no pip)."""
    home = tmp_path / "home"
    home.mkdir()
    return Request.new(
        update_id=update_id,
        root=str(home),
        install_root=str(ROOT),
        before=None,
        after=None,
        result_path=str(tmp_path / "result.json"),
        dependency_spec=dependency_digest(ROOT),
    )


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


# --- install kinds -------------------------------------------------------------------------------


def neutral_probes(tmp_path: Path) -> Probes:
    """Markers that exist nowhere: this test machine may itself be a container."""
    nowhere = tmp_path / "absent"
    return Probes(
        dockerenv=nowhere / ".dockerenv",
        containerenv=nowhere / ".containerenv",
        nix_store=nowhere / "nix" / "store",
        apt_roots=(nowhere / "apt",),
    )


# --- config migrations ---------------------------------------------------------------------------

LEGACY = """\
# Hermes config, edited by hand

model: hermes-4   # the default model
update_branch: stable  # pinned after the March incident
update_archive_url: "https://example.com/{branch}.zip"

# tools every profile gets
toolsets:
  - web
"""


def write_config(home: Path, text: str, mode: int = 0o644) -> Path:
    path = config_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chmod(path, mode)
    return path


def untouched(path: Path):
    """The file's bytes and mtime now, to compare with later."""
    return path.read_bytes(), os.stat(path).st_mtime_ns
