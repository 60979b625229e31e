"""``hermes mesh keys init|show|authorize|revoke|rotate``: the install's CURVE keys.

Anchored on the root home, whichever profile is active. Only public keys are ever printed.
"""

from __future__ import annotations

from typing import Any

from hermes_cli import output
from shared import curve_keys, homes


def _services(root) -> list[str]:
    """Every service key name of the install: the root services, and a gateway per profile."""
    names = [name for name, scope in homes.SERVICES.items() if scope == "root"]
    for profile in homes.list_profiles(root):
        names.append("gateway" if profile == homes.DEFAULT_PROFILE else f"gateway@{profile}")
    return names


def _where(args) -> str:
    return "servers" if args.server else "authorized"


def cmd_init(args) -> int:
    root = homes.root_home()
    created = curve_keys.init(root, _services(root))

    def text(d: dict[str, Any]) -> str:
        if not d["created"]:
            return f"every key already exists in {d['store']}"
        return f"created in {d['store']}: {', '.join(d['created'])}"

    output.emit(args, {"store": str(curve_keys.store(root)), "created": created}, text)
    return 0


def _public_keys(root) -> dict[str, Any]:
    top = curve_keys.store(root)
    services = {}
    for name in _services(root):
        try:
            services[name] = curve_keys.public_of(curve_keys.server_secret(root, name)).decode()
        except curve_keys.CurveKeyMissing:
            continue
    return {
        "store": str(top),
        "client": curve_keys.public_of(curve_keys.client_secret(root)).decode(),
        "services": services,
        "authorized": {n: k.decode() for n, k in curve_keys.public_keys(root, "authorized").items()},
        "servers": {n: k.decode() for n, k in curve_keys.public_keys(root, "servers").items()},
    }


def _keys_text(d: dict[str, Any]) -> str:
    lines = [f"store:  {d['store']}", f"client: {d['client']}"]
    for title in ("services", "authorized", "servers"):
        lines.append(f"{title}:")
        rows = d[title].items()
        lines += [f"  {name:<24} {key}" for name, key in rows] or ["  (none)"]
    return "\n".join(lines)


def cmd_show(args) -> int:
    output.emit(args, _public_keys(homes.root_home()), _keys_text)
    return 0


def cmd_authorize(args) -> int:
    where = _where(args)
    curve_keys.add_public(homes.root_home(), where, args.name, args.key)
    output.emit(args, {"added": args.name, "in": where}, lambda d: f"added {d['added']} to {d['in']}/")
    return 0


def cmd_revoke(args) -> int:
    where = _where(args)
    curve_keys.remove_public(homes.root_home(), where, args.name)
    output.emit(args, {"removed": args.name, "from": where}, lambda d: f"removed {d['removed']} from {d['from']}/")
    return 0


def cmd_rotate(args) -> int:
    root = homes.root_home()
    rotated: dict[str, str] = {}
    if args.client or not args.service:
        grace = curve_keys.ROTATION_GRACE if args.grace is None else args.grace
        rotated["client"] = curve_keys.rotate_client(root, grace=grace).decode()
    for name in args.service:
        curve_keys.validate_name(name)
        rotated[name] = curve_keys.rotate_server(root, name).decode()

    def text(d: dict[str, Any]) -> str:
        lines = [f"new public key of {name}: {key}" for name, key in d["rotated"].items()]
        if set(d["rotated"]) - {"client"}:
            lines.append("restart the rotated services: until then they serve with their old key")
        return "\n".join(lines)

    output.emit(args, {"rotated": rotated}, text)
    return 0
