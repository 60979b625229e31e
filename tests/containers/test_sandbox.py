"""The sandbox's own safeguards: a container that names no network gets only loopback (the
private configuration's ``netns = "none"``), and the sandbox refuses to start beside another
podman's state rather than touch it."""

from __future__ import annotations

import os

import pytest

from tests.support import podman_sandbox

pytestmark = pytest.mark.containers


def test_a_container_that_names_no_network_gets_only_loopback(sandbox, image):
    done = sandbox.podman("run", "--rm", image, "ls", "/sys/class/net")
    assert done.stdout.split() == ["lo"]


def test_it_refuses_to_start_beside_another_podmans_state(tmp_path, monkeypatch):
    foreign = tmp_path / "containers"
    foreign.mkdir()
    monkeypatch.setattr(podman_sandbox, "FOREIGN_STATE", (foreign,))
    with pytest.raises(podman_sandbox.SandboxRefused, match="another podman's state"):
        with podman_sandbox.PodmanSandbox():
            pass
    assert foreign.is_dir()  # refused, and left alone


def test_the_tier_says_in_one_line_why_it_cannot_run(monkeypatch):
    monkeypatch.setenv(podman_sandbox.OPT_OUT, "0")
    assert podman_sandbox.unavailable() == f"{podman_sandbox.OPT_OUT}=0"
    monkeypatch.delenv(podman_sandbox.OPT_OUT)
    monkeypatch.setattr(podman_sandbox, "TOOLS", ("podman", "no-such-tool-here"))
    why = podman_sandbox.unavailable()
    if os.geteuid() != 0:
        assert why == "the private podman needs root"
    else:
        assert why is not None and "no-such-tool-here" in why and "\n" not in why
