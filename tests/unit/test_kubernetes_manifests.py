"""The manifests in deploy/kubernetes: valid against the pinned Kubernetes versions' schemas
(strict: an unknown field is refused), and holding the rules docs/kubernetes.md gives them.

Each rule is checked on the manifests as they are, and found broken on a copy broken on purpose.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes"
SECRETS_SCRIPT = MANIFESTS / "make-secrets.sh"
COMPOSE = ROOT / "compose" / "compose.yml"
# The oldest Kubernetes the manifests are for, and the newest the validator bundles.
KUBERNETES_VERSIONS = ("1.29", "1.37")
WORKLOADS = ("StatefulSet", "Deployment")
# What HERMES_STOP_GRACE must leave of the pod's grace: the process exits, the kubelet sees it.
STOP_MARGIN = 5
KEY_STORE = "/mesh/curve"

Docs = list[dict[str, Any]]


def load() -> Docs:
    docs: Docs = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


def workloads(docs: Docs) -> Iterator[dict[str, Any]]:
    return (doc for doc in docs if doc["kind"] in WORKLOADS)


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item.get("value", "") for item in container.get("env", [])}


def service_of(container: dict[str, Any]) -> str:
    """The key name of the service a container runs, from its command."""
    command = container["command"]
    if command[:2] == ["python", "-m"] and command[2].startswith("services."):
        return command[2].removeprefix("services.")
    if command[0] == "hermes" and "gateway" in command and "run" in command:
        return f"gateway@{command[command.index('-p') + 1]}" if "-p" in command else "gateway"
    raise AssertionError(f"container {container['name']} runs no service the manifests know: {command}")


def tcp_ports(value: str) -> dict[str, int]:
    return {name: int(address.rsplit(":", 1)[1]) for name, address in (e.split("=", 1) for e in value.split(","))}


def problems(docs: Docs, script: str, *, schemas: bool = True) -> list[str]:
    """Every rule a manifest breaks; ``schemas``: the pinned versions' schemas too (about a
    second: the breakages that leave the schema alone skip it)."""
    found = [*_schema_problems(docs)] if schemas else []
    for workload in workloads(docs):
        found += _workload_problems(workload, script)
    found += _install_problems(docs)
    found += _pdb_problems(docs)
    found += _service_problems(docs)
    return found


def _schema_problems(docs: Docs) -> Iterator[str]:
    for doc in docs:
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                yield f"{doc['kind']} {doc['metadata']['name']}: invalid for Kubernetes {version}: {exc.message}"


def _workload_problems(workload: dict[str, Any], script: str) -> Iterator[str]:
    name = workload["metadata"]["name"]
    pod = workload["spec"]["template"]["spec"]
    pod_security = pod.get("securityContext", {})
    if "runAsUser" in pod_security:
        yield f"{name}: the pod pins runAsUser"
    volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}
    grace = pod.get("terminationGracePeriodSeconds", 30)
    key_volumes: dict[str, str] = {}
    for container in pod["containers"]:
        where = f"{name}/{container['name']}"
        security = container.get("securityContext", {})
        if "runAsUser" in security:
            yield f"{where}: pins runAsUser"
        if not (security.get("runAsNonRoot") or pod_security.get("runAsNonRoot")):
            yield f"{where}: not runAsNonRoot"
        if security.get("capabilities", {}).get("drop") != ["ALL"]:
            yield f"{where}: does not drop ALL capabilities"
        if security.get("allowPrivilegeEscalation") is not False:
            yield f"{where}: allows privilege escalation"
        seccomp = security.get("seccompProfile") or pod_security.get("seccompProfile") or {}
        if seccomp.get("type") != "RuntimeDefault":
            yield f"{where}: no RuntimeDefault seccomp profile"
        resources = container.get("resources", {})
        if not {"cpu", "memory"} <= set(resources.get("requests", {})) or "memory" not in resources.get("limits", {}):
            yield f"{where}: no cpu and memory requests and memory limit"
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            command = container.get(probe, {}).get("exec", {}).get("command", [])
            if not (command[:1] == ["hermes"] and "health" in command):
                yield f"{where}: its {probe} is not the mesh's health check"
        env = env_of(container)
        stop_grace = env.get("HERMES_STOP_GRACE")
        if stop_grace is None or int(stop_grace) + STOP_MARGIN > grace:
            yield f"{where}: HERMES_STOP_GRACE {stop_grace} does not leave {STOP_MARGIN} s of the pod's {grace} s"
        service = service_of(container)
        if service not in tcp_ports(env.get("HERMES_MESH_TCP", "=:0")):
            yield f"{where}: {service} is not in its HERMES_MESH_TCP"
        store = env.get("HERMES_HOME", "") + KEY_STORE
        mounts = [m for m in container.get("volumeMounts", []) if m["mountPath"] == store]
        if len(mounts) != 1 or not mounts[0].get("readOnly"):
            yield f"{where}: no read-only key store mounted at {store}"
            continue
        key_volumes[mounts[0]["name"]] = where
        yield from _key_problems(where, service, volumes.get(mounts[0]["name"], {}), script)
    for volume in volumes:
        if volume.startswith("keys-") and volume not in key_volumes:
            yield f"{name}: key volume {volume} is mounted by no container of its own"
    for other in pod["containers"]:
        for mount in other.get("volumeMounts", []):
            owner = key_volumes.get(mount["name"])
            if owner and owner != f"{name}/{other['name']}":
                yield f"{name}/{other['name']}: mounts {owner}'s keys"


def _key_problems(where: str, service: str, volume: dict[str, Any], script: str) -> Iterator[str]:
    items = []
    for source in volume.get("projected", {}).get("sources", []) + [{"secret": volume.get("secret")}]:
        secret = source.get("secret") or {}
        for item in secret.get("items", []):
            items.append(item["path"])
            if not _script_makes(script, secret["name"], item["key"]):
                yield f"{where}: make-secrets.sh makes no key {item['key']} in Secret {secret['name']}"
    secrets = [path for path in items if path.startswith("server/")]
    if secrets != [f"server/{service}.key_secret"]:
        yield f"{where}: mounts the secret keys {secrets}, not only its own (server/{service}.key_secret)"
    if volume.get("projected", {}).get("defaultMode", 0o644) & 0o027:
        yield f"{where}: its keys' defaultMode lets others read them or anyone write them"


def _script_makes(script: str, secret: str, key: str) -> bool:
    match = re.search(rf"^apply {re.escape(secret)} (.*?)(?=^apply |\Z)", script, re.M | re.S)
    return bool(match) and f"--from-file={key}=" in match.group(1)


def _install_problems(docs: Docs) -> Iterator[str]:
    """One install per mesh: every container, each gateway among them, has the same HERMES_HOME
    on the same workload's home claim, so one install id, one sign-in and one hook intake."""
    homes: dict[tuple[str, str, str], list[str]] = {}
    for workload in workloads(docs):
        name = workload["metadata"]["name"]
        claims = {t["metadata"]["name"] for t in workload["spec"].get("volumeClaimTemplates", [])}
        for container in workload["spec"]["template"]["spec"]["containers"]:
            home = env_of(container).get("HERMES_HOME", "")
            mounted = [m["name"] for m in container.get("volumeMounts", []) if m["mountPath"] == home]
            volume = mounted[0] if mounted and mounted[0] in claims else "no claim"
            homes.setdefault((name, volume, home), []).append(f"{name}/{container['name']}")
    if len(homes) > 1:
        yield f"{len(homes)} installs, not one: " + "; ".join(
            f"{', '.join(containers)} on {workload}'s {volume} at {home}"
            for (workload, volume, home), containers in homes.items()
        )


def _pod_labels(docs: Docs) -> dict[str, tuple[dict[str, str], bool]]:
    """workload -> (its pods' labels, whether it runs a gateway)."""
    return {
        w["metadata"]["name"]: (
            w["spec"]["template"]["metadata"]["labels"],
            any(service_of(c).startswith("gateway") for c in w["spec"]["template"]["spec"]["containers"]),
        )
        for w in workloads(docs)
    }


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _pdb_problems(docs: Docs) -> Iterator[str]:
    pdbs = [doc for doc in docs if doc["kind"] == "PodDisruptionBudget"]
    for pdb in pdbs:
        pods = sum(
            w["spec"].get("replicas", 1)
            for w in workloads(docs)
            if _selects(pdb["spec"]["selector"].get("matchLabels", {}), w["spec"]["template"]["metadata"]["labels"])
        )
        if pdb["spec"].get("maxUnavailable") == 0 or pdb["spec"].get("minAvailable", 0) >= max(pods, 1):
            yield f"{pdb['metadata']['name']}: holds every drain of its {pods} pod(s)"
    for workload, (labels, gateway) in _pod_labels(docs).items():
        chosen = [p for p in pdbs if _selects(p["spec"]["selector"].get("matchLabels", {}), labels)]
        if gateway and not chosen:
            yield f"{workload}: runs a gateway that no PodDisruptionBudget selects"
        if not gateway and chosen:
            yield f"{workload}: runs no gateway but a gateways' PodDisruptionBudget selects it"


def _service_problems(docs: Docs) -> Iterator[str]:
    """A Service reaches a container's port by its name: the pod's containers share one address,
    so a port by number would reach whichever container binds it."""
    services = [doc for doc in docs if doc["kind"] == "Service" and doc["spec"].get("clusterIP") != "None"]
    compose = tcp_ports(yaml.safe_load(COMPOSE.read_text())["x-service"]["environment"]["HERMES_MESH_TCP"])
    for service in services:
        for p in service["spec"]["ports"]:
            if not isinstance(p.get("targetPort"), str):
                yield f"Service {service['metadata']['name']}: its {p['name']} port targets no container port by name"
    for workload in workloads(docs):
        labels = workload["spec"]["template"]["metadata"]["labels"]
        containers = workload["spec"]["template"]["spec"]["containers"]
        named: dict[str, list[tuple[str, int]]] = {}
        for container in containers:
            for p in container.get("ports", []):
                named.setdefault(p["name"], []).append((container["name"], p["containerPort"]))
        for port_name, owners in named.items():
            if len(owners) > 1:
                yield f"{workload['metadata']['name']}: port name {port_name} is declared {len(owners)} times"
        for container in containers:
            service = service_of(container)
            port = tcp_ports(env_of(container)["HERMES_MESH_TCP"]).get(service)
            if port != compose.get(service):
                yield f"{service}: port {port}, not the compose file's {compose.get(service)}"
            reached = {
                (p["name"], p["port"], *named[p["targetPort"]][0])
                for s in services
                if _selects(s["spec"].get("selector", {}), labels)
                for p in s["spec"]["ports"]
                if len(named.get(p.get("targetPort"), [])) == 1
            }
            for kind, wanted in (("control", port), ("events", port and port + 1)):
                if (kind, wanted, container["name"], wanted) not in reached:
                    yield f"{service}: no Service reaches its {kind} port {wanted} by its container's port name"


def test_every_manifest_is_valid_and_keeps_the_rules():
    assert problems(load(), SECRETS_SCRIPT.read_text()) == []


def test_the_kustomization_lists_every_manifest():
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(
        p.name for p in MANIFESTS.glob("*.yaml") if p.name != "kustomization.yaml"
    )


def _first(docs: Docs, kind: str, name: str = "") -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and (not name or d["metadata"]["name"] == name))


def _containers(docs: Docs) -> list[dict[str, Any]]:
    return _first(docs, "StatefulSet", "hermes-root")["spec"]["template"]["spec"]["containers"]


def _volume(docs: Docs, name: str) -> dict[str, Any]:
    pod = _first(docs, "StatefulSet", "hermes-root")["spec"]["template"]["spec"]
    return next(v for v in pod["volumes"] if v["name"] == name)


def _pin_uid(docs: Docs) -> None:
    _containers(docs)[1]["securityContext"]["runAsUser"] = 10001


def _no_resources(docs: Docs) -> None:
    del _containers(docs)[2]["resources"]


def _unknown_field(docs: Docs) -> None:
    _containers(docs)[0]["livenessProbe"]["execc"] = {"command": ["true"]}


def _another_services_key(docs: Docs) -> None:
    sources = _volume(docs, "keys-hook-reporter")["projected"]["sources"]
    sources.append(copy.deepcopy(_volume(docs, "keys-gateway")["projected"]["sources"][0]))


def _mounts_anothers_keys(docs: Docs) -> None:
    mount = {"name": "keys-gateway", "mountPath": "/var/lib/hermes/gateway-keys", "readOnly": True}
    _containers(docs)[3]["volumeMounts"].append(mount)


def _pdb_selects_nothing(docs: Docs) -> None:
    _first(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"] = {"hermes-mesh/gateway": "no"}


def _grace_too_short(docs: Docs) -> None:
    _first(docs, "StatefulSet", "hermes-root")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 30


def _keys_readable_by_all(docs: Docs) -> None:
    _volume(docs, "keys-auth-worker")["projected"]["defaultMode"] = 0o444


def _no_probe(docs: Docs) -> None:
    del _containers(docs)[0]["readinessProbe"]


def _events_port_dropped(docs: Docs) -> None:
    service = _first(docs, "Service", "hermes-auth-worker")
    service["spec"]["ports"] = [p for p in service["spec"]["ports"] if p["name"] != "events"]


def _a_second_install(docs: Docs) -> None:
    """The coder gateway as it was: a StatefulSet of its own, with its own home claim."""
    coder = copy.deepcopy(_first(docs, "StatefulSet", "hermes-root"))
    coder["metadata"]["name"] = "hermes-gateway-coder"
    pod = coder["spec"]["template"]["spec"]
    pod["containers"] = [c for c in pod["containers"] if c["name"] == "gateway-coder"]
    pod["volumes"] = [v for v in pod["volumes"] if v["name"] in ("keys-gateway-coder", "tmp")]
    _containers(docs)[:] = [c for c in _containers(docs) if c["name"] != "gateway-coder"]
    docs.append(coder)


def _a_profiles_own_home(docs: Docs) -> None:
    coder = next(c for c in _containers(docs) if c["name"] == "gateway-coder")
    coder["volumeMounts"][0]["name"] = "tmp"


def _port_by_number(docs: Docs) -> None:
    _first(docs, "Service", "hermes-gateway-coder")["spec"]["ports"][0]["targetPort"] = 7422


def _a_port_name_twice(docs: Docs) -> None:
    coder = next(c for c in _containers(docs) if c["name"] == "gateway-coder")
    coder["ports"][0]["name"] = "gw-ctl"


def _pdb_holds_drains(docs: Docs) -> None:
    _first(docs, "PodDisruptionBudget")["spec"] = {
        "minAvailable": 1,
        "selector": {"matchLabels": {"hermes-mesh/gateway": "true"}},
    }


BREAKAGES: dict[str, tuple[Callable[[Docs], None], str]] = {
    "runAsUser pinned": (_pin_uid, "hermes-root/auth-worker: pins runAsUser"),
    "no resources": (_no_resources, "hermes-root/handoff-retry: no cpu and memory requests"),
    "an unknown field": (_unknown_field, "StatefulSet hermes-root: invalid for Kubernetes 1.29"),
    "another service's secret key": (_another_services_key, "mounts the secret keys ['server/hook_reporter"),
    "another container's key volume": (_mounts_anothers_keys, "hermes-root/hook-reporter: mounts hermes-root/gateway"),
    "a PDB selecting no gateway": (_pdb_selects_nothing, "hermes-root: runs a gateway that no PodDisruptionBudget"),
    "a grace shorter than the drain": (_grace_too_short, "does not leave 5 s of the pod's 30 s"),
    "keys readable by all": (_keys_readable_by_all, "hermes-root/auth-worker: its keys' defaultMode"),
    "no readiness probe": (_no_probe, "hermes-root/gateway: its readinessProbe is not"),
    "no events port": (_events_port_dropped, "auth_worker: no Service reaches its events port 7431"),
    "a second install": (_a_second_install, "2 installs, not one: hermes-root/gateway, hermes-root/auth-worker"),
    "a profile's own home": (_a_profiles_own_home, "hermes-root/gateway-coder on hermes-root's no claim"),
    "a Service port by number": (_port_by_number, "Service hermes-gateway-coder: its control port targets no"),
    "a port name twice": (_a_port_name_twice, "gateway@coder: no Service reaches its control port 7422"),
    "a PDB holding drains": (_pdb_holds_drains, "hermes-gateways: holds every drain of its 1 pod(s)"),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_a_manifest_broken_on_purpose_is_found(breakage):
    docs = load()
    breaks, expected = BREAKAGES[breakage]
    breaks(docs)
    found = problems(docs, SECRETS_SCRIPT.read_text(), schemas="invalid for Kubernetes" in expected)
    assert any(expected in problem for problem in found), found


def test_a_secret_the_script_does_not_make_is_found():
    script = SECRETS_SCRIPT.read_text().replace("--from-file=authorized.probe.key=", "--from-file=authorized.probe=")
    assert "make-secrets.sh makes no key authorized.probe.key in Secret hermes-mesh-trust" in "\n".join(
        problems(load(), script, schemas=False)
    )


def test_the_images_user_is_numeric_so_run_as_non_root_holds_without_a_uid():
    users = re.findall(r"^USER\s+(\S+)\s*$", (ROOT / "compose" / "Containerfile").read_text(), re.M)
    assert users and users[-1].isdigit() and int(users[-1]) != 0, users
