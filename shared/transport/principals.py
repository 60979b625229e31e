"""Who may call which op of a service: the rule, pure.

Two principals. The home's owner: an ipc caller (the private run directory lets no one else
in), or, over TCP, a connection let in with one of this install's own client keys (``local``,
and ``local-previous`` during a rotation's grace), which is also how one service of the mesh
calls another. A remote operator: any other authorized key, known by the name it is authorized
under. The owner may call every op. A remote key may call what the op declares
(``OpSpec.remote``): an ``allowed`` op; a ``with_grant`` op granted to its name; never a
``never`` op. A grant names an op with its service, ``gateway.drain``, since op names repeat
across services (``drain`` is the gateway's and the handoff retry worker's).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from shared.protocol import Code, OpSpec, Remote, RemoteError
from shared.transport import curve_keys


class Principal(NamedTuple):
    """Who sent a request: the owner, or a remote key by its name with what it is granted."""

    owner: bool
    name: str = ""  # a remote key's name, for the refusal; "" for the owner
    grants: frozenset[str] = frozenset()


OWNER = Principal(owner=True)


def grant_name(service: str, op: str) -> str:
    """How a grant names ``op`` of ``service``."""
    return f"{service}.{op}"


def principal(names: Iterable[str], grants: Mapping[str, frozenset[str]]) -> Principal:
    """The principal of a connection whose key is authorized under ``names`` now (one name, or
    more when the same key was authorized twice), given every name's ``grants``."""
    names = sorted(names)
    if curve_keys.OWN_CLIENTS.intersection(names):
        return OWNER
    granted = frozenset().union(*(grants.get(name, frozenset()) for name in names))
    return Principal(owner=False, name=", ".join(names), grants=granted)


def judge(caller: Principal, service: str, spec: OpSpec) -> RemoteError | None:
    """None when ``caller`` may call ``spec`` of ``service``; else the typed refusal, naming the
    op and the key's name (never the key)."""
    if caller.owner or spec.remote is Remote.ALLOWED:
        return None
    grant = grant_name(service, spec.name)
    if spec.remote is Remote.WITH_GRANT:
        if grant in caller.grants:
            return None
        why = f"it is not granted {grant} (`hermes mesh keys authorize NAME KEY --grant {grant}` on the service's host)"
    else:
        why = f"{grant} is only for this install's own keys"
    return RemoteError(
        Code.OP_NOT_GRANTED,
        f"client key {caller.name!r} may not call {spec.name!r}: {why}",
        detail={"op": spec.name, "service": service, "key_name": caller.name},
    )
