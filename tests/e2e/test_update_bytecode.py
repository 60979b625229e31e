"""An update leaves the new tree compiled: the completion compiles it before the fleet restarts,
every module's bytecode checked against its source's hash, so no process of the install
compiles its imports itself, after a rollback too; and the bytecode an install's processes
write never makes the tree dirty for the next update."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from services.updater.apply_git import is_dirty
from services.updater.tree_check import check_tree, tracked_roots
from shared.gateways import ops
from shared.transport.sync_client import SyncClient
from tests.support.installs import Install
from tests.support.processes import PACKAGES
from tests.support.releases import bump_version


def checked_against_its_source(source: Path) -> bool:
    """Whether ``source`` has bytecode an import takes as it is: checked against the source's
    hash (PEP 552 flags 0b11) and that hash is the source's on disk."""
    try:
        header = Path(importlib.util.cache_from_source(str(source))).read_bytes()[:16]
    except OSError:
        return False
    return (
        header[:4] == importlib.util.MAGIC_NUMBER
        and header[4:8] == (0b11).to_bytes(4, "little")
        and header[8:16] == importlib.util.source_hash(source.read_bytes())
    )


def assert_compiled(install: Install) -> None:
    """Every module of the install's tree has bytecode that matches its source on disk."""
    for module in ("shared/version.py", "services/gateway/app.py", "services/gateway/main.py"):
        assert checked_against_its_source(install.path / module), module
    stale = [
        str(source.relative_to(install.path))
        for package in PACKAGES
        for source in (install.path / package).rglob("*.py")
        if not checked_against_its_source(source)
    ]
    assert stale == []


def test_an_update_compiles_the_new_tree_before_the_fleet_restarts_onto_it(install: Install):
    gateway = install.gateway("default")
    # The install's processes write bytecode as an operator's do, whatever this machine says.
    imported = install.path / "services" / "gateway" / "app.py"
    assert Path(importlib.util.cache_from_source(str(imported))).is_file()

    new = install.release("release 2", edit=bump_version)  # shared/version.py: every process imports it
    result = install.hermes("update", "--yes", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["outcome"] == "success" and install.head() == new
    receipt = json.loads(Path(report["receipt"]).read_text())
    steps = [step["name"] for step in receipt["steps"]]
    assert steps.index("bytecode") < steps.index("restart")
    [bytecode] = [step for step in receipt["steps"] if step["name"] == "bytecode"]
    assert bytecode["ok"] is True and bytecode["detail"]["failed"] == 0
    assert receipt["followups"] == []

    assert_compiled(install)
    with SyncClient(gateway.endpoint.control) as client:
        assert client.call(ops.STATUS)["code_sha"] == new

    # Bytecode everywhere in the tree, and the next update's checks still see a clean tree.
    assert is_dirty(install.path) == []
    check = check_tree(install.path, tracked_roots(install.path), ())
    assert check.clean, check.to_dict()
    assert any("__pycache__" in path for path, _ in check.admitted)

    # A rollback takes the tree back through the same completion: compiled against the old sources.
    updated = install.head()
    result = install.hermes("update", "--rollback", "--yes", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["outcome"] == "success" and install.head() != updated
    receipt = json.loads(Path(report["receipt"]).read_text())
    assert [step["ok"] for step in receipt["steps"] if step["name"] == "bytecode"] == [True]
    assert_compiled(install)
