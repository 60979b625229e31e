"""``hermes mesh keys init|show|authorize|revoke|rotate|export``: the install's CURVE keys.

Anchored on the root home, whichever profile is active. Only public keys are ever printed.
A mesh whose services run elsewhere (each in its own container) is keyed from here too:
``init --profile`` makes keys for gateways of profiles this home does not have, ``show
--client`` prints the one key another install authorizes, and ``authorize --server --from``
trusts every service key another install's ``show --json`` lists. An authorized client key
may call, beyond the read-only ops, exactly the ops ``authorize --grant`` gives its name.
``export --service NAME --to DIR`` writes the store of one service alone, for the host or
container that runs it: its own secret key, never the client key or another service's.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from hermes_cli import curve_import, mesh_ops, output
from hermes_cli.errors import CliError
from shared import homes, mesh_tcp
from shared.gateways import ops
from shared.transport import curve_keys, grant_name


class KeysUsage(CliError):
    code = "keys_usage"


def _gateway_name(profile: str) -> str:
    return "gateway" if profile == homes.DEFAULT_PROFILE else f"gateway@{profile}"


def _services(root, extra_profiles: tuple[str, ...] = ()) -> list[str]:
    """Every service key name of the install: the root services, a gateway per profile, and
    one per profile of ``extra_profiles`` (those of a home out of sight, such as a container's)."""
    names = [name for name, scope in homes.SERVICES.items() if scope == "root"]
    for profile in (*homes.list_profiles(root), *extra_profiles):
        if _gateway_name(profile) not in names:
            names.append(_gateway_name(profile))
    return names


def _where(args) -> str:
    return "servers" if args.server else "authorized"


def cmd_init(args) -> int:
    root = homes.root_home()
    extra = tuple(homes.validate_profile_name(name) for name in args.profiles or ())
    created = curve_keys.init(root, _services(root, extra))

    def text(d: dict[str, Any]) -> str:
        if not d["created"]:
            return f"every key already exists in {d['store']}"
        return f"created in {d['store']}: {', '.join(d['created'])}"

    output.emit(args, {"store": str(curve_keys.store(root)), "created": created}, text)
    return 0


def _public_keys(root) -> dict[str, Any]:
    top = curve_keys.store(root)
    services = {}
    try:
        held = curve_keys.server_names(root)
    except curve_keys.CurveKeyMissing:
        held = []
    for name in [*_services(root), *held]:
        if name in services:
            continue
        try:
            services[name] = curve_keys.public_of(curve_keys.server_secret(root, name)).decode()
        except curve_keys.CurveKeyMissing:
            continue
    return {
        "store": str(top),
        "client": curve_keys.public_of(curve_keys.client_secret(root)).decode(),
        "services": services,
        "authorized": {n: k.decode() for n, k in curve_keys.public_keys(root, "authorized").items()},
        "grants": {n: sorted(g) for n, g in curve_keys.grants(root).items()},
        "servers": {n: k.decode() for n, k in curve_keys.public_keys(root, "servers").items()},
        "ports": _ports(root, services),
    }


def _ports(root, services: dict[str, Any]) -> dict[str, int]:
    """The TCP control port of every service listed that binds on TCP: what another home's
    ``mesh keys import --host`` needs to reach it (the same port, published by the host)."""
    ports = {}
    for name in services:
        address = mesh_tcp.tcp_address(root, name)
        if address is not None:
            ports[name] = address.port
    return ports


def _keys_text(d: dict[str, Any]) -> str:
    lines = [f"store:  {d['store']}", f"client: {d['client']}"]
    for title in ("services", "authorized", "servers"):
        lines.append(f"{title}:")
        rows = d[title].items()
        lines += [f"  {name:<24} {key}{_granted(d, title, name)}" for name, key in rows] or ["  (none)"]
    return "\n".join(lines)


def _granted(d: dict[str, Any], title: str, name: str) -> str:
    grants = d["grants"].get(name) if title == "authorized" else None
    return f"  granted: {', '.join(grants)}" if grants else ""


def cmd_show(args) -> int:
    root = homes.root_home()
    if args.client:  # for `authorize NAME "$(hermes mesh keys show --client)"` on another install
        client = curve_keys.public_of(curve_keys.client_secret(root)).decode()
        output.emit(args, {"client": client}, lambda d: d["client"])
        return 0
    output.emit(args, _public_keys(root), _keys_text)
    return 0


def cmd_authorize(args) -> int:
    root = homes.root_home()
    if args.grants and args.server:
        raise KeysUsage("--grant is for a client key: a server's key is trusted, not granted")
    if args.source is not None:
        if not args.server:
            raise KeysUsage("--from reads another install's service keys: it needs --server")
        if args.name is not None or args.key is not None:
            raise KeysUsage("give either --from FILE or NAME KEY, not both")
        keys = curve_import.services_of(_read_document(args.source))
        for name, key in keys.items():
            curve_keys.add_public(root, "servers", name, key)
        added = list(keys)
        output.emit(args, {"added": added, "in": "servers"}, lambda d: f"added {', '.join(d['added'])} to servers/")
        return 0
    if args.name is None or args.key is None:
        raise KeysUsage("authorize needs NAME KEY (or --server --from FILE)")
    where = _where(args)
    if where == "servers":
        curve_keys.add_public(root, where, args.name, args.key)
        output.emit(args, {"added": args.name, "in": where}, lambda d: f"added {d['added']} to {d['in']}/")
        return 0
    curve_keys.validate_name(args.name)
    curve_keys.validate_key(args.key, what="public key")
    grants = sorted({mesh_ops.check_grant(grant) for grant in args.grants})
    # The grants first: a key is never authorized, even for a moment, with more than it is given.
    curve_keys.set_grants(root, args.name, grants)
    curve_keys.add_public(root, where, args.name, args.key)

    def text(d: dict[str, Any]) -> str:
        return f"added {d['added']} to {d['in']}/, granted: {', '.join(d['grants']) or 'nothing but the read-only ops'}"

    output.emit(args, {"added": args.name, "in": where, "grants": grants}, text)
    return 0


def _read_document(source: str) -> bytes:
    """At most one byte past the limit of ``source`` (a path, or ``-`` for stdin): enough for
    the reader to tell a document that is too large."""
    limit = curve_import.MAX_DOCUMENT_BYTES + 1
    try:
        if source == "-":
            return sys.stdin.buffer.read(limit)
        with open(source, "rb") as f:
            return f.read(limit)
    except OSError as exc:
        raise curve_keys.CurveKeyInvalid(
            f"cannot read the keys document {source}: {exc.strerror or exc}", detail={"path": source}
        ) from None


def cmd_revoke(args) -> int:
    """Forget a key (an authorized client's grants with it)."""
    where = _where(args)
    curve_keys.remove_public(homes.root_home(), where, args.name)
    output.emit(args, {"removed": args.name, "from": where}, lambda d: f"removed {d['removed']} from {d['from']}/")
    return 0


def cmd_rotate(args) -> int:
    root = homes.root_home()
    grace = curve_keys.check_grace(curve_keys.ROTATION_GRACE if args.grace is None else args.grace)
    rotated: dict[str, str] = {}
    if args.client or not args.service:
        rotated["client"] = curve_keys.rotate_client(root, grace=grace).decode()
    names = [curve_keys.validate_name(name) for name in args.service]
    for name in names:
        curve_keys.server_secret(root, name)  # what cannot be rotated is refused before the wait
    if names:
        # The old keys serve their clients for the grace; then each service takes its new key
        # and ends the connections made under the old one.
        print(f"the old keys of {', '.join(names)} serve for {grace:g}s more", file=sys.stderr, flush=True)
        time.sleep(grace)
    for name in names:
        rotated[name] = curve_keys.rotate_server(root, name).decode()

    def text(d: dict[str, Any]) -> str:
        lines = [f"new public key of {name}: {key}" for name, key in d["rotated"].items()]
        if set(d["rotated"]) - {"client"}:
            lines.append("each rotated service serves with its new key within a second; give it to remote clients")
        return "\n".join(lines)

    output.emit(args, {"rotated": rotated}, text)
    return 0


def cmd_export(args) -> int:
    root = homes.root_home()
    name = curve_keys.validate_name(args.service)
    # A gateway's own health check is a probe turn (`hermes gateway health`): its own key may
    # turn that gateway and call nothing else; a worker's is a hello, which needs no grant.
    own = [grant_name(ops.SERVICE, ops.TURN.name)] if name.partition("@")[0] == ops.SERVICE else []
    written = curve_keys.export_service(root, name, Path(args.to), self_grants=own)

    def text(d: dict[str, Any]) -> str:
        return f"wrote the keys of {d['service']} to {d['to']}: {', '.join(d['written'])}"

    output.emit(args, {"service": name, "to": args.to, "written": written}, text)
    return 0
