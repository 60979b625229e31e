"""The install id across real processes: made once whoever starts first, the same for every
service of the install, and reported, with each process's own instance id, by every service."""

from __future__ import annotations

import os
import subprocess
import sys

from services.hook_reporter import ops as reporter_ops
from shared import homes, ids
from shared.transport.call_rules import NO_RETRY
from shared.transport.service import HELLO
from shared.transport.sync_client import SyncClient
from tests.support.processes import ROOT, python_env, read_state, wait_for


def test_concurrent_first_starts_agree_on_one_install_id(root):
    # Every process waits for the go file, then creates the id at once: one wins the link.
    go = root / "go"
    program = (
        "import os, sys, time; from pathlib import Path; from shared import ids\n"
        "while not os.path.exists(sys.argv[2]): time.sleep(0.001)\n"
        "print(ids.ensure_install_id(Path(sys.argv[1])), ids.instance_id())"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", program, str(root), str(go)],
            cwd=ROOT,
            env=python_env(),
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    go.touch()
    said = [proc.communicate(timeout=60)[0].split() for proc in procs]
    assert all(proc.returncode == 0 for proc in procs)
    assert {install for install, _ in said} == {ids.read_install_id(root)}
    assert len({instance for _, instance in said}) == 8  # one per process start
    assert sorted(p.name for p in root.iterdir()) == ["go", ids.INSTALL_ID_FILE]  # no temp file left


def test_every_service_reports_the_install_id_and_its_own_instance_id(root, gateways):
    gateway = gateways(root, "default")
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.hook_reporter"],
        cwd=ROOT,
        env=python_env(HERMES_HOME=str(root)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    reporter = homes.endpoint(root, reporter_ops.SERVICE, create=False).control
    try:

        def hello(address):
            try:
                with SyncClient(address, retry=NO_RETRY) as client:
                    return client.call(HELLO, timeout=2)
            except Exception:
                return None

        said = {"gateway": hello(gateway.endpoint.control), "reporter": wait_for(lambda: hello(reporter), timeout=20)}
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    install = ids.read_install_id(root)
    assert ids.is_id(install)
    assert {s["install_id"] for s in said.values()} == {install}
    assert said["gateway"]["instance_id"] != said["reporter"]["instance_id"]
    assert said["gateway"]["instance_id"] == read_state(gateway.home)["instance_id"]


def test_a_forked_process_is_another_instance():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: says its id and leaves, running nothing of the test runner's
        os.write(write, ids.instance_id().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert ids.is_id(child) and child != ids.instance_id()
