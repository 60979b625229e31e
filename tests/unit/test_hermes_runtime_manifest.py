"""The hermes runtime manifest (``runtime-packages/hermes/runtime.toml``) names what this CLI
really does: its launch and resume argv parse to ``chat``, its probe reads our version line."""

from __future__ import annotations

import tomllib

import pytest

from fleet.cli_grammar import build_top_level_parser, implied_command
from shared import version
from shared.operator import version_probe
from shared.protocol import RemoteError
from simulators.operator_sim import agents
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
        "text_policy": "hermes_safe_text",
    }
    agent, _ = agents.hermes_from("/bin/hermes", (ROOT / "runtime-packages" / "hermes" / "runtime.toml").read_text())
    assert agent.framed("two\nlines", submit=True) == (b"\x1b[200~two\nlines\x1b[201~", b"\r")
    assert agent.submit_delay == 0.15
    assert agent.framed("y", submit=False) == (b"\x1b[200~y\x1b[201~", b"")
    assert agents.shell().framed("ls", submit=True) == (b"ls\n", b"")


def test_hermes_input_holding_a_control_character_is_refused_before_any_byte_is_framed():
    # crates/daemon/src/agent/mod.rs: Hermes takes safe text only, newlines and tabs allowed.
    agent, _ = agents.hermes_from("/bin/hermes", (ROOT / "runtime-packages" / "hermes" / "runtime.toml").read_text())
    assert agent.framed("a\tb\nc ⚠️ é", submit=True)[0] == "\x1b[200~a\tb\nc ⚠️ é\x1b[201~".encode()
    for text in ("stop\x1b[201~rm -rf ~\r", "bell\x07", "\r", "del\x7f", "c1\x9b"):
        with pytest.raises(RemoteError) as refused:
            agent.framed(text, submit=True)
        assert (refused.value.code, refused.value.detail) == ("session_input_rejected", {"field": "text"})
    assert agents.shell().framed("\x1b", submit=False) == (b"\x1b", b"")  # the shell keeps every key


def test_a_text_policy_the_simulator_does_not_know_makes_the_runtime_incompatible():
    text = (ROOT / "runtime-packages" / "hermes" / "runtime.toml").read_text()
    with pytest.raises(agents.RuntimeIncompatible, match="text policy"):
        agents.hermes_from("/bin/hermes", text.replace('text_policy = "hermes_safe_text"', 'text_policy = "raw"'))
