"""The compose files validate against the compose schema (``docker-compose config -q``, no
engine needed), and the CI override keeps every service off any bridge: the check the tier
makes before it brings anything up."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.support.podman_sandbox import (
    SandboxRefused,
    bridged_services,
    compose_config,
    refuse_bridges,
    state_differences,
)
from tests.support.processes import ROOT

pytestmark = pytest.mark.containers

BASE = ROOT / "compose" / "compose.yml"
CI = ROOT / "compose" / "compose.ci.yml"
CI_ENV = {"HERMES_CI_MESH_TCP": "gateway=tcp://127.0.0.1:1"}


def _config(*files, env=None, quiet=False) -> subprocess.CompletedProcess[str]:
    if shutil.which("docker-compose") is None:
        pytest.skip("container tier: docker-compose is not installed (scripts/container-setup.sh)")
    argv = ["docker-compose", *(f"--file={f}" for f in files), "config", *(["-q"] if quiet else [])]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin", **(env or {})}
    )


def _merged(*files, env=None) -> dict:
    _config(*files, env=env, quiet=True)  # skips where docker-compose is missing
    return compose_config(files, env)


def test_every_compose_file_validates():
    assert _config(BASE, quiet=True).returncode == 0
    done = _config(BASE, CI, env=CI_ENV, quiet=True)
    assert done.returncode == 0, done.stderr


def test_the_ci_override_needs_its_ports_named():
    done = _config(BASE, CI, quiet=True)
    assert done.returncode != 0 and "HERMES_CI_MESH_TCP" in done.stderr


def test_the_ci_override_puts_no_service_on_a_bridge_and_the_base_would():
    merged = _merged(BASE, CI, env=CI_ENV)
    assert bridged_services(merged) == []
    assert {spec["network_mode"] for spec in merged["services"].values()} == {"host"}
    # The users' file is on the default network: the check is what keeps CI off it.
    assert bridged_services(_merged(BASE)) == sorted(_merged(BASE)["services"])
    with pytest.raises(SandboxRefused, match="would get a bridge"):
        refuse_bridges([BASE])
    refuse_bridges([BASE, CI], CI_ENV)


def test_every_service_has_an_init_the_one_home_and_its_own_keys_read_only():
    services = _merged(BASE)["services"]
    keys = {name: spec for name, spec in services.items() if name != "keys"}
    for name, spec in services.items():
        assert spec["init"] is True, name
    for name, spec in keys.items():
        mounts = {m.split(":")[1]: m for m in spec["volumes"]}
        assert mounts["/home/hermes/.hermes"].split(":")[0] == "home", name
        assert mounts["/home/hermes/.hermes/mesh/curve"] == f"keys-{name}:/home/hermes/.hermes/mesh/curve:ro", name
        assert int(spec["environment"]["HERMES_STOP_GRACE"]) < _seconds(spec["stop_grace_period"]), name
    # The whole store is the keys job's alone; it writes each service's own into that one's volume,
    # which the service mounts as external: `up` before the keys step stops at once.
    job = {m.split(":")[0]: m.split(":")[1] for m in services["keys"]["volumes"]}
    assert job.pop("keys") == "/home/hermes/.hermes/mesh/curve"
    assert sorted(job) == sorted(f"export-{name}" for name in keys)
    volumes = _merged(BASE, env={"COMPOSE_PROJECT_NAME": "p"})["volumes"]
    for name in keys:
        assert volumes[f"keys-{name}"] == {"name": f"p_keys-{name}", "external": True}, name
        assert volumes[f"export-{name}"] == {"name": f"p_keys-{name}"}, name


def _seconds(duration: str) -> float:
    return float(duration.removesuffix("s"))


def test_a_differing_host_aspect_is_reported_and_equal_ones_are_not():
    before = {"links": "lo UP", "ip_forward": "0"}
    assert state_differences(before, dict(before)) == []
    found = state_differences(before, {"links": "lo UP\ncni-podman0 UP", "ip_forward": "1"})
    assert [line.split(":")[0] for line in found] == ["ip_forward", "links"]
    assert "cni-podman0" in found[1]


def test_every_service_has_a_health_check_and_a_restart_policy():
    for files, env in (((BASE,), None), ((BASE, CI), CI_ENV)):
        for name, spec in _merged(*files, env=env)["services"].items():
            check, restart = spec.get("healthcheck"), spec.get("restart")
            assert check and restart, name
            if check.get("disable") or check.get("test") == ["NONE"]:  # how `config` writes `disable: true`
                assert restart == "no", name  # only a one-shot job goes unchecked
                continue
            assert {"test", "interval", "timeout", "retries", "start_period"} <= set(check), name
            if name in ("portal",):
                continue  # the test's simulator: no hermes service of its own to ask
            # A long-running service: its own health check kills it when hung, and the engine
            # starts it again.
            assert restart == "unless-stopped", name
            test = check["test"]
            assert test[:1] == ["CMD"] and "health" in test and test[-2:] == ["--kill-after", str(check["retries"])], (
                name
            )
