"""``hermes mesh keys import|forget --host`` and ``mesh hosts`` as an operator runs them: an
import adds and never replaces, and a forget killed between its two steps (the keys gone, the
config entry not yet) is finished by the same forget again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from shared.mesh_tcp import TCP_ENV
from shared.transport import curve_keys
from tests.support.cli import hermes

TCP = "gateway=tcp://0.0.0.0:7420,gateway@coder=tcp://0.0.0.0:7422"


def _document(tmp_path: Path) -> Path:
    east = tmp_path / "east"
    assert hermes("mesh", "keys", "init", "--profile", "coder", home=east, env_extra={TCP_ENV: TCP}).returncode == 0
    shown = hermes("mesh", "keys", "show", "--json", home=east, env_extra={TCP_ENV: TCP})
    path = tmp_path / "east.json"
    path.write_text(shown.stdout)
    return path


def _hosts(home: Path) -> list[dict]:
    done = hermes("mesh", "hosts", "--json", home=home)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["hosts"]


def test_an_import_adds_a_host_and_a_second_address_is_refused(tmp_path):
    document, home = _document(tmp_path), tmp_path / "home"
    done = hermes("mesh", "keys", "import", "--host", "east", "--address", "10.0.0.2", str(document), home=home)
    assert done.returncode == 0, done.stderr
    assert _hosts(home) == [
        {"host": "east", "address": "10.0.0.2", "services": {"gateway": 7420, "gateway@coder": 7422}, "untrusted": []}
    ]
    moved = hermes("mesh", "keys", "import", "--host", "east", "--address", "10.0.0.3", str(document), home=home)
    assert moved.returncode != 0 and "is at 10.0.0.2, not 10.0.0.3" in moved.stderr, moved.stderr
    assert "Traceback" not in moved.stderr
    assert _hosts(home)[0]["address"] == "10.0.0.2"


def test_a_forget_killed_after_the_keys_went_is_finished_by_the_same_forget(tmp_path):
    document, home = _document(tmp_path), tmp_path / "home"
    assert (
        hermes("mesh", "keys", "import", "--host", "east", "--address", "h", str(document), home=home).returncode == 0
    )
    shutil.rmtree(curve_keys.store(home) / "hosts" / "east")  # the kill: keys gone, config entry still there
    done = hermes("mesh", "keys", "forget", "--host", "east", home=home)
    assert done.returncode == 0, done.stderr
    assert _hosts(home) == []
    unknown = hermes("mesh", "keys", "forget", "--host", "east", home=home)
    assert unknown.returncode != 0 and "no host 'east'" in unknown.stderr


def test_forgetting_a_service_the_host_does_not_name_is_refused_by_name(tmp_path):
    document, home = _document(tmp_path), tmp_path / "home"
    assert (
        hermes("mesh", "keys", "import", "--host", "east", "--address", "h", str(document), home=home).returncode == 0
    )
    done = hermes("mesh", "keys", "forget", "--host", "east", "auth_worker", home=home)
    assert done.returncode != 0 and "names no service 'auth_worker'" in done.stderr
    assert hermes("mesh", "keys", "forget", "--host", "east", "gateway", home=home).returncode == 0
    assert _hosts(home)[0]["services"] == {"gateway@coder": 7422}
