"""The probe as the installer and doctor run it: the fixed script in the Python beside the
target ``hermes`` (``python3 -I -c SCRIPT -- PLUGIN POLICY``), on a plugin rendered into a stage
directory, read through ``run_probe``, and judged by the registration checks. Fake plugins show
what the dry run catches; fake interpreters show how a probe that misbehaves fails."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import tempfile
import textwrap
from pathlib import Path

import psutil
import pytest

from hermes_cli.operator import probe_client
from hermes_cli.operator.hermes_bin import OUTPUT_CAP, HermesUnusable
from hermes_cli.operator.probe_client import ProbeFailed, ProbeResult, run_probe
from hermes_cli.operator.registration import EXPECTED_HOOKS, EXPECTED_TOOLS, TOOLS_BY_MODE, checks
from shared.hooks import ENDPOINT_ENV, SESSION_ENV
from tests.support.hermes_wrappers import wrapper
from tests.support.operator_plugin import PAYLOAD, TOKEN, policy_fields, write_policy
from tests.support.processes import wait_for

SECRET = "sk-live the owner's password"


VENV = Path(sys.executable).parent.parent  # this checkout's, whose Python has the payload's imports


def fake_python(tmp_path: Path, script: str) -> str:
    """A ``hermes`` whose sibling ``python3`` is the shell ``script``."""
    path = wrapper(tmp_path / "fake", VENV, "exit 0")
    (path.parent / "python3").unlink()
    (path.parent / "python3").write_text("#!/bin/sh\n" + script)
    (path.parent / "python3").chmod(0o700)
    return str(path)


@pytest.fixture
def hermes_bin(tmp_path: Path) -> str:
    """A ``hermes`` beside this checkout's Python (what the installer is given)."""
    return str(wrapper(tmp_path / "venv", VENV, "exit 0"))


def policy_file(tmp_path: Path) -> Path:
    return tmp_path / "state" / "policy.json"


def probe(hermes_bin: str, plugin_dir: Path, **options) -> ProbeResult:
    return run_probe(hermes_bin, plugin_dir, policy_file(plugin_dir.parents[4]), **options)


def stage_dir(tmp_path: Path) -> Path:
    return tmp_path / "home" / "plugins" / "operators" / ".pohunek-stage-k3x9" / "pohunek"


def render(tmp_path: Path, **policy) -> Path:
    """The payload rendered into a stage directory, its token the path of a policy written
    with ``policy`` over the defaults (what the installer stages)."""
    policy_path = write_policy(policy_file(tmp_path), policy_fields("ipc:///nowhere", **policy))
    stage = stage_dir(tmp_path)
    shutil.copytree(PAYLOAD, stage, ignore=shutil.ignore_patterns("__pycache__"))
    init = stage / "__init__.py"
    init.write_text(init.read_text().replace(TOKEN, json.dumps(str(policy_path))))
    return stage


def fake_plugin(tmp_path: Path, body: str) -> Path:
    stage = stage_dir(tmp_path)
    stage.mkdir(parents=True)
    (stage / "plugin.yaml").write_text("name: pohunek\nversion: 0.0.1\n")
    (stage / "__init__.py").write_text(textwrap.dedent(body))
    return stage


def statuses(result: ProbeResult | None, mode: str | None) -> list[str]:
    return [check["status"] for check in checks(result, mode)]


@pytest.mark.parametrize("mode", ["read_only", "manage", "full"])
def test_a_rendered_plugin_registers_its_modes_tools_its_skill_and_seven_clean_hooks(tmp_path, hermes_bin, mode):
    result = probe(hermes_bin, render(tmp_path, access_mode=mode))
    assert (result.loaded, result.error, result.state) == (True, None, "ready")
    assert len(result.tools) == EXPECTED_TOOLS[mode] and set(result.tools) == TOOLS_BY_MODE[mode]
    assert result.skills == ("pohunek",)
    assert result.hooks == EXPECTED_HOOKS
    dry = result.hook_dry_run
    assert (dry.calls, dry.forbidden, dry.escaped, dry.forced_failure_swallowed) == (7, (), (), True)
    assert statuses(result, mode)[:2] == ["pass", "pass"]


def test_a_policy_that_fails_its_rules_registers_hooks_and_no_tools(tmp_path, hermes_bin):
    result = probe(hermes_bin, render(tmp_path, access_mode="root"))
    assert (result.loaded, result.state, result.tools, result.skills) == (True, "policy_invalid", (), ())
    assert result.hooks == EXPECTED_HOOKS and result.hook_dry_run.forced_failure_swallowed
    assert statuses(result, "manage")[:2] == ["fail", "fail"]


def test_the_callers_session_and_endpoint_never_reach_the_probe(tmp_path, hermes_bin, monkeypatch):
    # A caller inside a managed session with a reporter endpoint of its own: still the forced failure.
    monkeypatch.setenv(SESSION_ENV, "a-real-session")
    monkeypatch.setenv(ENDPOINT_ENV, f"ipc://{tmp_path / 'reporter.in'}")
    result = probe(hermes_bin, render(tmp_path))
    assert result.hook_dry_run.forced_failure_swallowed and result.hook_dry_run.calls == 7
    assert not (tmp_path / "reporter.in").exists()


def test_a_plugin_bound_to_another_policy_is_found_out(tmp_path, hermes_bin):
    stage = render(tmp_path)
    result = run_probe(hermes_bin, stage, tmp_path / "elsewhere.json")
    assert result.loaded and not result.policy_bound
    assert statuses(result, "manage")[0] == "fail"


def test_the_probe_runs_isolated_with_only_its_fixed_arguments_and_environment(tmp_path):
    seen = tmp_path / "seen"
    bin_path = fake_python(
        tmp_path, f'printf "%s\\n" "$@" > {seen}.args; cat /proc/$$/environ > {seen}.env; pwd > {seen}.cwd; exit 3\n'
    )
    with pytest.raises(ProbeFailed):
        run_probe(bin_path, tmp_path / "plugin", tmp_path / "policy.json")
    args = Path(f"{seen}.args").read_text().split("\n")[:-1]
    script_lines = probe_client.SCRIPT.count("\n")
    assert args[:2] == ["-I", "-c"] and "\n".join(args[2 : 3 + script_lines]) == probe_client.SCRIPT
    assert args[3 + script_lines :] == ["--", str(tmp_path / "plugin"), str(tmp_path / "policy.json")]
    env = dict(item.split("=", 1) for item in Path(f"{seen}.env").read_text().split("\0") if item)
    assert set(env) == {"NO_COLOR", "TERM", "LANG", "PYTHONDONTWRITEBYTECODE", "TMPDIR"}
    assert (env["NO_COLOR"], env["TERM"], env["LANG"], env["PYTHONDONTWRITEBYTECODE"]) == ("1", "dumb", "C", "1")
    assert Path(f"{seen}.cwd").read_text() == "/\n"
    assert not Path(env["TMPDIR"]).exists(), "the probe's scratch directory is removed"


def test_a_hook_that_starts_a_process_is_forbidden_and_fails_hook_registration(tmp_path, hermes_bin):
    stage = fake_plugin(
        tmp_path,
        """
        import subprocess
        def register(ctx):
            ctx.register_hook("on_session_start", lambda **kw: subprocess.run(["true"], check=False))
        """,
    )
    result = probe(hermes_bin, stage)
    assert result.loaded and result.hooks == ("on_session_start",)
    assert "subprocess.Popen" in result.hook_dry_run.forbidden and result.hook_dry_run.escaped == ()
    assert statuses(result, "manage")[2] == "fail"


def test_a_hook_that_raises_has_escaped_and_its_text_is_never_printed(tmp_path, hermes_bin):
    body = f"""
    def boom(**kw):
        print({SECRET!r})
        raise RuntimeError({SECRET!r})
    def register(ctx):
        print({SECRET!r})
        ctx.register_hook("pre_llm_call", boom)
        ctx.register_hook("post_llm_call", lambda **kw: None)
    """
    stage = fake_plugin(tmp_path, body)
    result = probe(hermes_bin, stage)
    assert result.hook_dry_run.escaped == ("pre_llm_call",) and result.hook_dry_run.calls == 2
    assert not result.hook_dry_run.forced_failure_swallowed
    assert statuses(result, "manage")[2] == "fail"


def test_a_plugin_that_does_not_import_is_reported_and_dry_runs_nothing(tmp_path, hermes_bin):
    result = probe(hermes_bin, fake_plugin(tmp_path, f"raise ValueError({SECRET!r})\n"))
    assert (result.loaded, result.error, result.hooks, result.hook_dry_run.calls) == (False, "import_failed", (), 0)
    assert statuses(result, "manage") == ["fail", "fail", "fail"]


def test_a_plugin_whose_import_hangs_times_out_and_its_process_group_is_killed(tmp_path, hermes_bin, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where the parent makes the child's TMPDIR
    pids = tmp_path / "pids"
    body = f"""
    import os, subprocess, time
    child = subprocess.Popen(["sleep", "600"])
    with open({str(pids)!r}, "w") as f:
        f.write(f"{{os.getpid()}} {{child.pid}}")
    time.sleep(600)
    """
    with pytest.raises(ProbeFailed) as failed:
        probe(hermes_bin, fake_plugin(tmp_path, body), timeout=8.0)
    assert failed.value.code == "plugin_probe_failed" and failed.value.detail == {"reason": "timeout"}
    started = [int(pid) for pid in pids.read_text().split()]
    gone = wait_for(lambda: not any(psutil.pid_exists(pid) for pid in started), timeout=10, what="the group to go")
    assert gone
    assert list(scratch.iterdir()) == [], "a killed probe leaves no scratch directory"


def test_a_plugin_dir_with_no_plugin_is_a_plugin_that_did_not_load(tmp_path, hermes_bin):
    result = run_probe(hermes_bin, tmp_path / "missing", tmp_path / "policy.json")
    assert (result.loaded, result.error) == (False, "manifest_invalid")
    assert statuses(result, "manage") == ["fail", "fail", "fail"]


@pytest.mark.parametrize(
    "script",
    [
        f"echo {shlex.quote('not a document ' + SECRET)}\n",
        "echo '{\"schema\": 1}'\n",
        f"head -c {OUTPUT_CAP + 1} /dev/zero | tr '\\\\0' x\n",
    ],
)
def test_a_probe_printing_anything_but_its_document_is_malformed(tmp_path, script):
    with pytest.raises(ProbeFailed) as failed:
        run_probe(fake_python(tmp_path, script), tmp_path, tmp_path / "policy.json")
    assert failed.value.detail == {"reason": "malformed"} and SECRET not in failed.value.message


def test_a_probe_that_exits_non_zero_fails_with_exit_and_a_missing_python_is_refused(tmp_path):
    with pytest.raises(ProbeFailed) as failed:
        run_probe(fake_python(tmp_path, "exit 3\n"), tmp_path, tmp_path / "policy.json")
    assert failed.value.detail == {"reason": "exit", "exit_code": 3}
    lone = tmp_path / "lone" / "hermes"
    lone.parent.mkdir()
    lone.write_text("#!/bin/sh\n")
    lone.chmod(0o700)
    with pytest.raises(HermesUnusable) as refused:
        run_probe(str(lone), tmp_path, tmp_path / "policy.json")
    assert refused.value.code == "hermes_runtime_invalid" and refused.value.detail["flag"] == "--hermes-bin"
