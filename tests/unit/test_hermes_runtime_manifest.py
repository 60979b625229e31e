"""The hermes runtime manifest (``runtime-packages/hermes/runtime.toml``) names what this CLI
really does: its launch and resume argv parse to ``chat``, its probe reads our version line."""

from __future__ import annotations

import tomllib

from services.operator_sim import agents
from shared import version
from shared.cli_grammar import build_top_level_parser, implied_command
from shared.operator import version_probe
from tests.support.processes import ROOT

MANIFEST = tomllib.loads((ROOT / "runtime-packages" / "hermes" / "runtime.toml").read_text())
REF = "20261201_185301_ab12cd"


def test_the_launch_argv_is_a_new_chat():
    runtime = MANIFEST["runtime"]
    args = build_top_level_parser().parse_args(runtime["args"])
    assert (runtime["id"], runtime["program"], implied_command(args)) == ("hermes", "hermes", "chat")
    assert (args.resume, args.continue_session) == (None, False)


def test_the_resume_argv_gives_the_reference_back_to_chat():
    resume = MANIFEST["resume"]
    assert resume["supported"] is True and MANIFEST["native_reference"]["strategy"] == "reported"
    argv = [arg.replace("{reference}", REF) for arg in resume["args"]]
    args = build_top_level_parser().parse_args(argv)
    assert (implied_command(args), args.resume) == ("chat", REF)
    assert MANIFEST["fork"]["supported"] is False


def test_the_version_probe_reads_our_version_line_inside_its_range():
    probe = MANIFEST["runtime"]["version_probe"]
    assert probe == {"parser": version_probe.PARSER, "args": ["--version"], "min": "0.20.0", "below": "1.0.0"}
    assert version_probe.dotted(version_probe.check(version.version_line())) == version.AGENT_RELEASE


def test_input_is_framed_as_the_daemon_types_into_hermes():
    # crates/daemon/src/agent/hermes.rs: a bracketed paste, then "\r" alone 150 ms later.
    assert MANIFEST["input"] == {
        "bracketed_paste": True,
        "submit": "\r",
        "submit_delay_ms": 150,
        "text_policy": "unrestricted",
    }
    agent, _ = agents.hermes_from("/bin/hermes", (ROOT / "runtime-packages" / "hermes" / "runtime.toml").read_text())
    assert agent.framed("two\nlines", submit=True) == (b"\x1b[200~two\nlines\x1b[201~", b"\r")
    assert agent.submit_delay == 0.15
    assert agent.framed("y", submit=False) == (b"\x1b[200~y\x1b[201~", b"")
    assert agents.shell().framed("ls", submit=True) == (b"ls\n", b"")
