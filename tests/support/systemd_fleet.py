"""Installs whose ``hermes`` runs inside the systemd sandbox: their gateways are real
``hermes gateway install --supervisor systemd`` units of its managers, in either scope."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from fleet.supervisors.systemd import unit_name
from shared.mesh_tcp import TCP_ENV
from tests.support.cli import HERMES
from tests.support.installs import Install
from tests.support.systemd_sandbox import Sandbox

# Not NAME=tcp://HOST:PORT: a gateway started with it exits 78 (a broken configuration).
BROKEN_TCP_SETTING = "not-an-address"


class SandboxInstall(Install):
    """An ``Install`` (origin, install, dev clone, root home, all on disk in the sandbox's work
    dir) whose commands run inside ``box``; ``scopes`` says which manager runs each profile's unit."""

    def __init__(self, box: Sandbox, base: Path):
        super().__init__(base)
        self.box = box
        self.scopes: dict[str, str] = {}

    def hermes(self, *args: str, timeout: float = 300, profile: str | None = None, **env: str):  # type: ignore[override]
        argv = [*HERMES, *(["-p", profile] if profile else []), *args]
        return self.box.run(argv, env=self.env(**env), cwd=self.path, timeout=timeout, check=False)

    def hermes_json(self, *args: str, timeout: float = 300, profile: str | None = None, **env: str) -> tuple[int, Any]:  # type: ignore[override]
        done = self.hermes(*args, "--json", timeout=timeout, profile=profile, **env)
        try:
            return done.returncode, json.loads(done.stdout)
        except json.JSONDecodeError:
            raise AssertionError(
                f"hermes {' '.join(args)} --json printed no document: {done.stdout!r} {done.stderr!r}"
            ) from None

    def unit(self, profile: str, scope: str, *options: str, start: bool = True, enable: bool = False) -> str:
        """Install ``profile``'s unit in ``scope`` with the install's ``options`` (making the
        profile first), and start it."""
        if profile != "default" and not (self.root / "profiles" / profile).is_dir():
            made = self.hermes("profile", "create", profile)
            assert made.returncode == 0, made.stderr
        code, report = self.hermes_json(
            "gateway", "install", "--supervisor", "systemd", "--scope", scope, *options, profile=profile
        )
        assert code == 0 and report["reloaded"] is True, report
        self.scopes[profile] = scope
        if enable:
            self.box.systemctl("enable", report["unit"], user=scope == "user")
        if start:
            self.start(profile)
        return report["unit"]

    def start(self, profile: str) -> None:
        started = self.hermes("gateway", "start", profile=profile)
        assert started.returncode == 0, started.stderr

    def break_next_start(self, profile: str) -> None:
        """Give ``profile``'s unit a broken TCP setting in a drop-in: the running gateway is left
        alone, its next one exits 78 saying why. Only the unit sees it, never the CLI."""
        self.drop_in(profile, "broken", {TCP_ENV: BROKEN_TCP_SETTING})

    def drop_in(self, profile: str, name: str, environment: dict[str, str]) -> None:
        """Set ``environment`` for ``profile``'s unit in a drop-in ``name``, for its next start."""
        user = self.scopes[profile] == "user"
        directory = self.box.config / "systemd" / "user" if user else self.box.system_unit_dir
        drop_in = directory / f"{unit_name(profile)}.d"
        drop_in.mkdir(parents=True, exist_ok=True)
        lines = "".join(f"Environment={key}={value}\n" for key, value in environment.items())
        (drop_in / f"{name}.conf").write_text(f"[Service]\n{lines}")
        self.box.systemctl("daemon-reload", user=user)

    def show(self, profile: str, *properties: str) -> dict[str, str]:
        return self.box.show(unit_name(profile), *properties, user=self.scopes[profile] == "user")

    def journal(self, profile: str, *, after: str | None = None) -> list[str]:
        return self.box.journal(unit_name(profile), user=self.scopes[profile] == "user", after=after)

    def answering(self) -> dict[str, dict[str, Any]]:
        """profile -> the gateway that answers for it, as ``hermes gateway status`` sees it."""
        code, report = self.hermes_json("gateway", "status")
        assert code == 0, report
        return {g["profile"]: g for g in report["gateways"]}

    def update(self) -> tuple[int, dict[str, Any], dict[str, Any]]:
        """``hermes update --yes --json``: its exit code, its document and its receipt."""
        code, report = self.hermes_json("update", "--yes")
        return code, report, json.loads(Path(report["receipt"]).read_text())

    def remove_units(self) -> None:
        """Stop, disable and remove every unit this install wrote, so the managers forget them."""
        for profile, scope in self.scopes.items():
            user, name = scope == "user", unit_name(profile)
            for verb in ("stop", "disable", "reset-failed"):
                self.box.systemctl(verb, name, user=user, check=False)
            directory = self.box.config / "systemd" / "user" if user else self.box.system_unit_dir
            (directory / name).unlink(missing_ok=True)
            shutil.rmtree(directory / f"{name}.d", ignore_errors=True)
            self.box.systemctl("daemon-reload", user=user)
        self.scopes.clear()
