"""Nothing of the pulled code runs in the interpreter that imported the old code.

The release under test makes every module of the new tree note, on import, the pid of the
process importing it. After ``hermes update`` the updater's pid must have no note at all,
while the completion's does (the notes work, and the completion ran the new tree).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.processes import PACKAGES

MARKER = (
    "\nimport os as _marker_os\n"
    "if _marker_os.environ.get('HERMES_IMPORT_MARKERS'):\n"
    "    with open(_marker_os.path.join(_marker_os.environ['HERMES_IMPORT_MARKERS'], str(_marker_os.getpid())), 'a') as _f:\n"
    "        _f.write(__name__ + '\\n')\n"
)


def mark_every_module(dev: Path) -> None:
    for package in PACKAGES:
        for module in (dev / package).rglob("*.py"):
            module.write_text(module.read_text() + MARKER)


def test_the_updater_never_imports_a_module_of_the_new_tree(install, tmp_path):
    markers = tmp_path / "imports"
    markers.mkdir()
    install.release("release that notes every import", edit=mark_every_module)
    done = install.hermes("update", "--yes", "--json", HERMES_IMPORT_MARKERS=str(markers))
    assert done.returncode == 0, done.stdout + done.stderr
    receipt = json.loads(Path(json.loads(done.stdout)["receipt"]).read_text())
    noted = {int(p.name): p.read_text().split() for p in markers.iterdir()}
    completion = receipt["completion"]["pid"]
    assert "services.updater.completion_contract" in noted.get(completion, []), noted  # the notes work
    assert receipt["pid"] not in noted, noted[receipt["pid"]]
