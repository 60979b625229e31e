"""How the code at an install root was deployed, and so whether ``hermes update`` may update it
in place.

Only a git checkout is updated in place. Every other deployment kind (a container image, the
Nix store, a system or pip package) is refused with the command its own deployment model
updates it by, instead of fighting that model.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

KindName = Literal["git", "pip", "docker", "podman", "nix", "apt", "unknown"]
ExternalKind = Literal["pip", "docker", "podman", "nix", "apt"]
EXTERNAL_COMMANDS: dict[ExternalKind, str] = {
    "docker": "docker compose pull && docker compose up -d",
    "podman": "podman-compose pull && podman-compose up -d",
    "nix": "nix profile upgrade hermes-mesh",
    "apt": "sudo apt-get update && sudo apt-get install --only-upgrade hermes-mesh",
    "pip": "pip install --upgrade hermes-mesh",
}


@dataclass(frozen=True)
class InstallKind:
    kind: KindName
    in_place: bool
    external_command: str | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "in_place": self.in_place,
            "external_command": self.external_command,
            "reason": self.reason,
        }


def refusal(install: InstallKind) -> str:
    """Why an install is not updated here, and what to run instead."""
    instead = f": run `{install.external_command}`" if install.external_command else f" ({install.reason})"
    return f"{install.kind} installs are not updated in place{instead}"


@dataclass(frozen=True)
class Probes:
    """Where the deployment markers live; tests point them at temp dirs."""

    dockerenv: Path = Path("/.dockerenv")
    containerenv: Path = Path("/run/.containerenv")  # podman's
    nix_store: Path = Path("/nix/store")
    apt_roots: tuple[Path, ...] = (Path("/usr/lib/python3/dist-packages"),)


SYSTEM_PROBES = Probes()
_PACKAGE_DIRS = frozenset({"site-packages", "dist-packages"})


# Set by the mesh's container images (and by any deployment that wants to say what it is).
INSTALL_KIND_ENV = "HERMES_INSTALL_KIND"


def detect_install_kind(
    install_root: Path, *, env: Mapping[str, str] | None = None, probes: Probes = SYSTEM_PROBES
) -> InstallKind:
    """How the code at ``install_root`` was deployed, and so whether it may be updated in place."""
    env = os.environ if env is None else env
    root = Path(install_root).absolute()
    spellings = (root, Path(os.path.realpath(root)))

    # The mesh's own images say what they are; a deployment's word beats any guess.
    declared = env.get(INSTALL_KIND_ENV, "")
    external = next((kind for kind in EXTERNAL_COMMANDS if kind == declared), None)
    if external is not None:
        return _external(external, f"{INSTALL_KIND_ENV}={declared}")
    if declared == "git" and (root / ".git").exists():
        return InstallKind("git", True, None, f"{INSTALL_KIND_ENV}=git, checkout at {root}")
    if any(_under(p, probes.nix_store) for p in spellings):
        return _external("nix", f"installed in the Nix store ({probes.nix_store}), which is read-only")
    if any(_under(p, apt_root) for p in spellings for apt_root in probes.apt_roots):
        return _external("apt", "installed by the system package manager")
    # A checkout is updated in place wherever it runs: a developer's container included.
    if (root / ".git").exists():  # a directory, or a gitdir file (worktree, submodule)
        return InstallKind("git", True, None, f"git checkout at {root}")
    if env.get("container") == "podman" or probes.containerenv.exists():
        return _external("podman", "running in a Podman container: the image is the unit of update")
    if probes.dockerenv.exists() or env.get("container") == "docker":
        return _external("docker", "running in a Docker container: the image is the unit of update")
    if any(_PACKAGE_DIRS.intersection(p.parts) for p in spellings):
        return _external("pip", "installed as a Python package")
    return InstallKind(
        "unknown", False, None, f"{root} is neither a git checkout nor an installed package: reinstall it by hand"
    )


def _external(kind: ExternalKind, reason: str) -> InstallKind:
    return InstallKind(kind, False, EXTERNAL_COMMANDS[kind], reason)


def _under(path: Path, base: Path) -> bool:
    return path.is_relative_to(base)
