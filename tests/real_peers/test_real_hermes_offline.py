"""The real Hermes Agent runs here, offline, in the harness's environment."""

from __future__ import annotations

import re


def test_the_real_version_line_comes_first_and_the_run_stays_offline(real_hermes_agent, tmp_path):
    done = real_hermes_agent.run(["--version"], home=tmp_path)
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert re.fullmatch(
        rf"Hermes Agent v{re.escape(real_hermes_agent.version)} \(\d{{4}}\.\d{{1,2}}\.\d{{1,2}}\)", first
    )


def test_the_real_plugins_verbs_are_the_ones_the_operator_drives(real_hermes_agent, tmp_path):
    done = real_hermes_agent.run(["plugins", "enable", "--help"], home=tmp_path)
    assert done.returncode == 0, done.stderr
    for flag in ("--allow-tool-override", "--no-allow-tool-override"):
        assert flag in done.stdout
    assert "--json" not in done.stdout
