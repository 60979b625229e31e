"""``hermes mesh keys import --host``, ``mesh keys forget --host`` and ``mesh hosts``: the other
hosts this home sees (``shared.mesh_hosts``).

An import reads another host's ``hermes mesh keys show --json`` and adds what it names: the
public keys of its services that bind on TCP to ``hosts/<host>/`` of the key store, then the
host's address and ports to ``mesh.hosts`` in ``config.yaml``. Nothing is replaced: a key or
port that differs from what this home holds is refused, naming it. The keys go first, so a
kill between the two steps leaves keys that no config names yet, and the same import run again
finds them the same and writes the config.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hermes_cli import curve_import, output
from hermes_cli.commands.mesh_keys import KeysUsage, _read_document
from shared import config, files, homes, mesh_hosts
from shared.transport import curve_keys


def cmd_import(args) -> int:
    root = homes.root_home()
    name = mesh_hosts.validate_host_name(args.host, "--host")
    raw = _read_document(args.source)
    keys = curve_import.services_of(raw)
    ports = curve_import.ports_of(raw)
    reached = {service: ports[service] for service in keys if service in ports}
    if not reached:
        raise KeysUsage(
            "the keys document names no service on TCP: run `hermes mesh keys show --json` where the "
            "host's services have their TCP addresses (HERMES_MESH_TCP or mesh.tcp)"
        )
    known = mesh_hosts.hosts(root).get(name)
    address = args.address if args.address is not None else (known.address if known else None)
    if address is None:
        raise KeysUsage(f"host {name!r} is new: give its --address")
    host = mesh_hosts.Host(name, mesh_hosts.validate_address(address, "--address"), reached)
    if known is not None:
        _refuse_changes(known, host)  # before any key is written
    added = curve_keys.add_host_keys(root, name, {service: keys[service] for service in reached})
    _record(root, host)
    skipped = sorted(set(keys) - set(reached))

    def text(d: dict[str, Any]) -> str:
        lines = [f"host {d['host']} at {d['address']}: added {', '.join(d['added']) or 'nothing new'}"]
        if d["skipped"]:
            lines.append(f"not on TCP there, so not reachable from here: {', '.join(d['skipped'])}")
        return "\n".join(lines)

    result = {"host": name, "address": host.address, "added": added, "services": reached, "skipped": skipped}
    output.emit(args, result, text)
    return 0


def _refuse_changes(known: mesh_hosts.Host, new: mesh_hosts.Host) -> None:
    if known.address != new.address:
        raise mesh_hosts.MeshHostsInvalid(
            f"host {known.name!r} is at {known.address}, not {new.address}: an import adds, never replaces "
            f"(`hermes mesh keys forget --host {known.name}` first, if it moved)",
            detail={"field": "address", "host": known.name},
        )
    for service, port in new.services.items():
        if known.services.get(service, port) != port:
            raise mesh_hosts.MeshHostsInvalid(
                f"host {known.name!r} has {service} on port {known.services[service]}, not {port}: an import "
                f"adds, never replaces (`hermes mesh keys forget --host {known.name} {service}` first)",
                detail={"field": f"services.{service}", "host": known.name},
            )


def _record(root: Path, host: mesh_hosts.Host) -> None:
    """Add ``host``'s address and services to ``mesh.hosts`` (what is there stays)."""
    path = config.config_path(homes.ensure_home(root))
    with files.locked(path):
        doc = config.load_document(root)
        section = _mapping(_mapping(doc.data, "mesh"), "hosts")
        entry = _mapping(section, host.name)
        entry.setdefault("address", host.address)
        services = _mapping(entry, "services")
        for service, port in host.services.items():
            services.setdefault(service, port)
        mesh_hosts.parse({host.name: dict(entry)}, "the new entry")  # what is written reads back
        config.save_document(root, doc)


def _mapping(parent: Any, key: str) -> Any:
    from ruamel.yaml.comments import CommentedMap

    found = parent.get(key)
    if found is None:
        found = parent[key] = CommentedMap()
    if not isinstance(found, dict):
        raise mesh_hosts.MeshHostsInvalid(f"config key {key} is not a mapping", detail={"field": key})
    return found


def cmd_forget(args) -> int:
    """Forget a host's service (its key and port), or the whole host: the keys first, then the
    config entry, so a forget killed between the two is finished by the same forget again."""
    root = homes.root_home()
    host = mesh_hosts.host(root, args.host)
    name, service = host.name, args.service
    if service is not None and service not in host.services and service not in curve_keys.host_keys(root, name):
        raise curve_keys.CurveKeyUnknown(
            f"host {name!r} names no service {service!r}", detail={"host": name, "name": service}
        )
    forgotten = curve_keys.forget_host_key(root, name, service)
    path = config.config_path(root)
    with files.locked(path):
        doc = config.load_document(root)
        hosts = (doc.data.get("mesh") or {}).get("hosts") or {}
        entry = hosts.get(name)  # gone already if another forget ran meanwhile
        if entry is not None and service is None:
            del hosts[name]
        elif entry is not None:
            (entry.get("services") or {}).pop(service, None)
        config.save_document(root, doc)

    def text(d: dict[str, Any]) -> str:
        what = ", ".join(d["forgotten"]) or "no key"
        return f"host {d['host']}: forgot {what}" + ("" if d["service"] else " and the host")

    output.emit(args, {"host": name, "service": args.service, "forgotten": forgotten}, text)
    return 0


def cmd_hosts(args) -> int:
    """The hosts this home names, each with its address, services and whether their keys are held."""
    root = homes.root_home()
    rows = []
    for host in mesh_hosts.hosts(root).values():
        trusted = curve_keys.host_keys(root, host.name)
        rows.append(
            {
                "host": host.name,
                "address": host.address,
                "services": host.services,
                "untrusted": sorted(set(host.services) - set(trusted)),
            }
        )

    def text(d: dict[str, Any]) -> str:
        if not d["hosts"]:
            return "no other hosts (`hermes mesh keys import --host NAME --address ADDRESS FILE` adds one)"
        rows = [
            [
                r["host"],
                r["address"],
                ", ".join(f"{s}:{p}" for s, p in r["services"].items()),
                ", ".join(r["untrusted"]) or "-",
            ]
            for r in d["hosts"]
        ]
        return output.table(["HOST", "ADDRESS", "SERVICES", "NO KEY"], rows)

    output.emit(args, {"hosts": rows}, text)
    return 0
