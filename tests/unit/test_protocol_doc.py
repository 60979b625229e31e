"""docs/protocol.md against the code: its table of idempotent ops and its worked example of
the short socket directory are what the services and ``shared.homes`` really do."""

from __future__ import annotations

import hashlib
import importlib
import os
import re
from pathlib import Path

import pytest

from shared import homes
from shared.protocol import OpSpec
from tests.support.processes import ROOT

DOC = (ROOT / "docs" / "protocol.md").read_text()

# Each row of the doc's table, and the op tables of the service it names.
OP_TABLES = {
    "every service": ["shared.protocol"],
    "gateway": ["shared.gateways.ops"],
    "updater": ["services.updater.ops"],
    "auth_worker": ["services.auth_worker.ops"],
    "handoff_retry": ["services.handoff_retry.ops"],
    "hook_reporter": ["services.hook_reporter.ops"],
    "gateway_host": ["fleet.supervisors.host"],
    "operator session daemon": ["shared.operator.protocol"],
    "operator simulator": ["simulators.operator_sim.ops"],
}


def _section(title: str) -> str:
    start = DOC.index(f"\n## {title}\n")
    end = DOC.find("\n## ", start + 1)
    return DOC[start : end if end != -1 else None]


def _documented() -> dict[str, dict[str, tuple[bool, bool]]]:
    """service -> op -> (idempotent, streams), read from the table's rows."""
    table: dict[str, dict[str, tuple[bool, bool]]] = {}
    for line in _section("Idempotent ops").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("service", "---"):
            continue
        ops = table.setdefault(cells[0], {})
        for idempotent, cell in ((True, cells[1]), (False, cells[2])):
            for name, streams in re.findall(r"`([a-z_.]+)`( \(streams\))?", cell):
                ops[name] = (idempotent, bool(streams))
    return table


def _served(modules: list[str]) -> dict[str, tuple[bool, bool]]:
    specs = [v for m in modules for v in vars(importlib.import_module(m)).values() if isinstance(v, OpSpec)]
    return {spec.name: (spec.idempotent, spec.streaming) for spec in specs}


def test_the_doc_names_every_service_of_a_home():
    assert set(homes.SERVICES) <= set(_documented())


@pytest.mark.parametrize("service", sorted(OP_TABLES))
def test_the_idempotency_table_is_each_services_op_table(service):
    assert _documented()[service] == _served(OP_TABLES[service])


def test_the_table_has_no_row_the_code_lacks():
    assert set(_documented()) == set(OP_TABLES)


def _example() -> dict[str, str]:
    block = re.search(r"```\nhome: .*?```", _section("Where a service listens"), re.DOTALL)
    assert block, "the worked example is gone"
    return dict(re.findall(r"^(\w[\w ,]*?): +(.+)$", block.group(0), re.MULTILINE))


def test_the_worked_example_is_what_the_code_computes(short_dir):
    example = _example()
    home = Path(example["home"])
    assert os.path.realpath(home) == str(home)  # nothing on this machine changes its spelling
    digest = example["hash"]
    # The doc's algorithm, step by step, and the code's.
    assert hashlib.sha256(os.fsencode(os.path.realpath(home))).hexdigest()[:16] == digest
    socket = home / "run" / "gateway.ctl"
    assert example["socket"] == f"<home>/run/gateway.ctl is {len(os.fsencode(socket))} bytes, over 107"
    assert len(os.fsencode(socket)) > 107
    runtime = short_dir / "runtime"  # short: a parallel worker's tmp_path is too long to hold the sockets
    runtime.mkdir(mode=0o700)
    found = homes.endpoint(home, "gateway", create=False, env={"XDG_RUNTIME_DIR": str(runtime)})
    assert (found.fallback, found.control) == (True, f"ipc://{runtime}/hermes/{digest}/gateway.ctl")
    stated = example["gateway control endpoint, uid 1000, no XDG_RUNTIME_DIR"]
    assert stated == f"ipc:///tmp/hermes-1000/{digest}/gateway.ctl"
