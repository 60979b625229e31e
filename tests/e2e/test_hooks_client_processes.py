"""The hook client in other processes: a forked child reports through its own socket, and the
module functions read the environment of the process they run in."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from shared.identity import process_identity
from tests.support.hook_reports import (
    CONNECT_WAIT_MS,
    MANAGED,
    SESSION,
    connected,
    counts,
    first_received_is_the_sentinel,
    receive,
)
from tests.support.processes import ROOT, python_env

pytestmark = pytest.mark.root(run_dir=True)


# --- processes ------------------------------------------------------------------------------


def test_a_forked_child_reports_through_its_own_socket(hook_client, root, intake, bind_pull):
    pull = bind_pull(intake)
    client = connected(hook_client(MANAGED, root))
    assert client.report_activity("working") is True
    assert receive(pull)["pid"] == os.getpid()

    child = os.fork()
    if child == 0:  # the child: never return into pytest
        code = 1
        try:
            sent = client.prepare(CONNECT_WAIT_MS) and client.report_activity("idle")
            client.close()  # let the report leave before _exit
            code = 0 if sent else 2
        finally:
            os._exit(code)
    frame = receive(pull)  # the parent's socket in the child would deliver nothing
    child_identity = process_identity(child)  # unreaped, so still readable
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert (frame["pid"], frame["start_time"]) == (child, child_identity.start_time)
    assert frame["state"] == "idle"
    # The parent's own socket is untouched by the child.
    assert client.report_activity("working") is True
    assert receive(pull)["pid"] == os.getpid()


def _run_hooks(program: str, env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, "-c", f"from shared import hooks\n{program}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_module_functions_report_from_os_environ(root, intake, bind_pull):
    pull = bind_pull(intake)
    program = "print(hooks.report_native_id('abc'), hooks.report_activity('busy'), hooks.counters())"
    env = python_env(HERMES_HOME=str(root), POHUNEK_SESSION_ID=SESSION)
    env.pop("POHUNEK_HOOK_ENDPOINT", None)
    out = _run_hooks(program, env)
    assert out == "True False " + str(counts(sent=1, refused=1))
    frame = receive(pull)
    assert (frame["kind"], frame["native_id"], frame["session"]) == ("native_id", "abc", SESSION)


def test_the_module_functions_report_nothing_outside_a_managed_session(root, intake, bind_pull):
    pull = bind_pull(intake)
    env = python_env(HERMES_HOME=str(root))
    env.pop("POHUNEK_SESSION_ID", None)
    out = _run_hooks("print(hooks.report_activity('working'), hooks.counters())", env)
    assert out == "False " + str(counts(unmanaged=1))
    assert first_received_is_the_sentinel(pull, root)
