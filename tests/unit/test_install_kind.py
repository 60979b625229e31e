"""Which kind of install a directory is, from markers alone: pip, unknown, podman, docker, nix, apt."""

from __future__ import annotations

import dataclasses

import pytest

from services.updater.install_kind import EXTERNAL_COMMANDS, Probes, detect_install_kind
from tests.support.updater import neutral_probes

# --- install kind ------------------------------------------------------------------------------


@pytest.mark.parametrize("packages", ["site-packages", "dist-packages"])
def test_package_dir_is_pip(tmp_path, packages):
    root = tmp_path / "venv" / "lib" / "python3.11" / packages
    root.mkdir(parents=True)
    kind = detect_install_kind(root, env={}, probes=neutral_probes(tmp_path))
    assert (kind.kind, kind.in_place, kind.external_command) == ("pip", False, EXTERNAL_COMMANDS["pip"])


def test_plain_dir_is_unknown_and_refused(tmp_path):
    root = tmp_path / "somewhere"
    root.mkdir()
    kind = detect_install_kind(root, env={}, probes=neutral_probes(tmp_path))
    assert (kind.kind, kind.in_place, kind.external_command) == ("unknown", False, None)
    assert str(root) in kind.reason


def test_podman_container_env_is_podman_not_docker(tmp_path):
    root = tmp_path / "r"
    root.mkdir()
    kind = detect_install_kind(root, env={"container": "podman"}, probes=neutral_probes(tmp_path))
    assert (kind.kind, kind.in_place) == ("podman", False)
    assert kind.external_command == "podman-compose pull && podman-compose up -d"
    assert EXTERNAL_COMMANDS["docker"] == "docker compose pull && docker compose up -d"


def test_podman_marker_file_is_podman(tmp_path):
    root = tmp_path / "r"
    root.mkdir()
    marker = tmp_path / ".containerenv"
    marker.touch()
    probes = dataclasses.replace(neutral_probes(tmp_path), containerenv=marker)
    assert detect_install_kind(root, env={}, probes=probes).kind == "podman"
    # Podman's marker beats docker's: a podman container may carry both.
    both = dataclasses.replace(probes, dockerenv=marker)
    assert detect_install_kind(root, env={}, probes=both).kind == "podman"


def test_a_checkout_in_a_podman_container_is_still_git(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".git").mkdir()  # what the rule looks at; a real checkout is tests/e2e/test_update_plan.py's
    marker = tmp_path / ".containerenv"
    marker.touch()
    probes = dataclasses.replace(neutral_probes(tmp_path), containerenv=marker)
    assert detect_install_kind(repo, env={"container": "podman"}, probes=probes).kind == "git"


@pytest.mark.parametrize("declared", ["podman", "docker"])
def test_a_declared_container_kind_is_taken_at_its_word(tmp_path, declared):
    root = tmp_path / "r"
    root.mkdir()
    kind = detect_install_kind(root, env={"HERMES_INSTALL_KIND": declared}, probes=neutral_probes(tmp_path))
    assert (kind.kind, kind.external_command) == (declared, EXTERNAL_COMMANDS[declared])
    assert "HERMES_INSTALL_KIND" in kind.reason


def test_docker_container_env_is_docker(tmp_path):
    root = tmp_path / "r"
    root.mkdir()
    assert detect_install_kind(root, env={"container": "docker"}, probes=neutral_probes(tmp_path)).kind == "docker"


def test_nix_store(tmp_path):
    store = tmp_path / "nix" / "store"
    root = store / "abc123-hermes-mesh-0.1.0" / "lib" / "python3.11" / "site-packages"
    root.mkdir(parents=True)
    probes = Probes(dockerenv=tmp_path / "none", nix_store=store, apt_roots=())
    kind = detect_install_kind(root, env={}, probes=probes)
    assert (kind.kind, kind.in_place, kind.external_command) == ("nix", False, "nix profile upgrade hermes-mesh")


def test_nix_store_reached_through_a_symlink(tmp_path):
    store = tmp_path / "nix" / "store"
    real = store / "abc-hermes"
    real.mkdir(parents=True)
    (tmp_path / "profile").symlink_to(real)
    probes = Probes(dockerenv=tmp_path / "none", nix_store=store, apt_roots=())
    assert detect_install_kind(tmp_path / "profile", env={}, probes=probes).kind == "nix"


def test_apt_dist_packages(tmp_path):
    apt = tmp_path / "usr" / "lib" / "python3" / "dist-packages"
    apt.mkdir(parents=True)
    probes = Probes(dockerenv=tmp_path / "none", nix_store=tmp_path / "nix", apt_roots=(apt,))
    kind = detect_install_kind(apt, env={}, probes=probes)
    assert (kind.kind, kind.in_place) == ("apt", False)
    assert kind.external_command == "sudo apt-get update && sudo apt-get install --only-upgrade hermes-mesh"
