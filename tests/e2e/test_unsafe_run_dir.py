"""Clients refuse a run dir that is not private, as the services do: on a live mesh whose root
``run/`` is made world-writable or handed to another uid, ``hermes gateway status`` refuses
with ``unsafe_run_dir`` and the doctors report it as a finding, without asking any socket."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import mesh_roots
from tests.support.cli import hermes, hermes_json
from tests.support.processes import wait_for

pytestmark = pytest.mark.slow

NOBODY = 65534


@pytest.fixture(scope="module")
def live_root() -> Iterator[Path]:
    """A live mesh (supervisord, the gateways of default and coder, the workers beside them)."""
    with mesh_roots.mesh_root("coder") as root:
        up = hermes("mesh", "up", home=root, timeout=120)
        assert up.returncode == 0, up.stdout + up.stderr
        wait_for(lambda: (root / "run" / "gateway.ctl").exists(), timeout=60, what="the default gateway")
        yield root


def make_unsafe(run: Path, how: str) -> None:
    if how == "0777":
        os.chmod(run, 0o777)
    else:
        os.chown(run, NOBODY, -1)


@pytest.fixture(params=["0777", "owned by nobody"])
def unsafe_run(request, live_root) -> Iterator[Path]:
    if request.param != "0777" and os.geteuid() != 0:
        pytest.skip("handing a dir to another uid needs root")
    run = live_root / "run"
    st = os.stat(run)
    make_unsafe(run, request.param)
    try:
        yield live_root
    finally:
        os.chown(run, st.st_uid, st.st_gid)
        os.chmod(run, 0o700)


def test_the_mesh_answers_while_its_run_dir_is_private(live_root):
    code, status = hermes_json("gateway", "status", home=live_root)
    assert code == 0, status
    assert {g["profile"] for g in status["gateways"]} >= {"default", "coder"}


def test_gateway_status_refuses_an_unsafe_run_dir(unsafe_run):
    code, refused = hermes_json("gateway", "status", home=unsafe_run)
    assert (code, refused["error"]["code"]) == (2, "unsafe_run_dir")
    assert refused["error"]["detail"]["path"] == str(unsafe_run / "run")
    text = hermes("gateway", "status", home=unsafe_run)
    assert text.returncode == 2 and "Traceback" not in text.stderr
    assert f"refusing to use {unsafe_run / 'run'}" in text.stderr


def test_operator_doctor_reports_an_unsafe_run_dir_as_a_permissions_finding(unsafe_run):
    code, report = hermes_json("operator", "doctor", home=unsafe_run)
    assert code == 1 and report["ok"] is False
    findings = {f["check"]: f for f in report["findings"]}
    assert findings["permissions"]["code"] == "unsafe_run_dir"
    assert "reporter" not in findings  # its socket was not asked


def test_doctor_reports_an_unsafe_run_dir_and_asks_no_socket_in_it(unsafe_run):
    code, report = hermes_json("doctor", home=unsafe_run)
    assert code == 1 and report["ok"] is False
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    assert [c["name"] for c in failed] == ["profile default: run dir"]
    names = {c["name"] for c in report["checks"]}
    assert "profile default: gateway" not in names  # no endpoint of the unsafe dir is listed as fine
    assert "profile coder: gateway" in names  # the other profile is still checked
