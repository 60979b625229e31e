"""Signing in, in this process, against a portal: an account from the simulator's grant, and one
sign-in run with its request and its states."""

from __future__ import annotations

import trio

from nous import store
from nous.access_token import read_claims
from services.auth_worker.signin import CancelFlag, SignInRequest, run_sign_in


def account_from_grant(sim, email="ada@example.com", tier="free"):
    """An account record for tokens the simulator granted ``email``, as a sign-in would save it."""
    tokens = sim.grant(email, tier)
    claims = read_claims(tokens["access_token"])
    return store.account_record(
        sub=claims.sub,
        email=claims.email,
        tier=claims.tier,
        host=claims.host,
        access_token=tokens["access_token"],
        refresh_token=tokens["refresh_token"],
        expires_in=tokens["expires_in"],
        portal=sim.url,
        ca_bundle=None,
    )


def request(root, sim, *, profile_home=None, replace=False, ca_bundle=None, sign_in_id="s1"):
    return SignInRequest(sign_in_id, root, profile_home or root, sim.url, ca_bundle, replace_account=replace)


async def sign_in(req, *, on_code=None, cancel=None, guard=None):
    """Run one sign-in; ``on_code(state)`` runs in a thread once the code is shown. The states
    emitted and the terminal one."""
    seen = []
    cancel = cancel or CancelFlag()
    async with trio.open_nursery() as nursery:

        async def emit(state) -> None:
            seen.append(state)
            if state.name == "Code" and on_code is not None:
                nursery.start_soon(trio.to_thread.run_sync, on_code, state)

        with trio.fail_after(60):
            terminal = await run_sign_in(req, emit, cancel, persist_guard=guard)
    return seen, terminal
