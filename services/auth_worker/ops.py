"""The auth worker's control protocol. Light on purpose (no trio, no zmq): the CLI imports it.

- ``sign_in {sign_in_id, profile, replace_account?, portal_url?, ca_bundle?}`` streams the
  states ``Code``, ``Waiting`` and ``Retrying`` as events and answers the terminal state;
  every state is ``{"state", ..., "copy", "copy_terminal"}`` (``services.auth_worker.states``).
  The caller names the sign-in, so it can cancel it before the first event arrives. The
  terminal state is kept (``outcomes``: 64 sign-ins, 15 minutes) before the answer goes out;
  an id that is running or kept is refused with ``sign_in_exists``.
- ``cancel {sign_in_id}`` → ``{"known": bool, "cancelled": bool, "state"?}``: for a running
  sign-in ``cancelled`` says whether the cancel won (false: the save had begun, and the
  sign-in completes); ``sign_in_result`` then tells how it ended. For one that had already
  ended, ``state`` is its terminal state (``cancelled`` false). For an id the worker does not
  know (``known`` false), ``cancelled`` is true: the id is kept as cancelled, so a
  ``sign_in`` request still on its way never starts.
- ``sign_in_result {sign_in_id, wait?}`` → ``{"known", "running", "state"?}``: a bounded
  long-poll. While the sign-in runs it waits up to ``wait`` seconds (at most
  ``RESULT_WAIT_MAX``) for the end; ``state`` is the terminal state once it has ended.
- ``status`` → ``{"account": public view, "keepalive": {...}, "sign_ins": n, "pid", "code_sha"}``;
  never a token.
- ``refresh {force?}`` → ``{"result", "reason", "expires_at"}``.
- ``token`` → ``{"access_token", "expires_at", "host"}`` for processes of the mesh (the
  endpoint lives in the 0700 ``run/`` dir); typed errors ``not_signed_in``/``needs_sign_in``.
"""

from __future__ import annotations

from shared.protocol import Field, OpSpec, Remote

SERVICE = "auth_worker"
SIGN_IN_ID_MAX = 64
MAX_SIGN_IN_SECONDS = 30 * 60 + 120

SIGN_IN = OpSpec(
    "sign_in",
    {
        "sign_in_id": Field(str, max_len=SIGN_IN_ID_MAX),
        "profile": Field(str, max_len=64),
        "replace_account": Field(bool, required=False),
        "portal_url": Field(str, required=False, max_len=2048),
        "ca_bundle": Field(str, required=False, max_len=4096),
    },
    streaming=True,
    timeout=MAX_SIGN_IN_SECONDS,
    remote=Remote.WITH_GRANT,
)
CANCEL = OpSpec(
    "cancel",
    {"sign_in_id": Field(str, max_len=SIGN_IN_ID_MAX)},
    idempotent=True,
    timeout=10.0,
    remote=Remote.WITH_GRANT,
)
RESULT_WAIT_MAX = 30.0
SIGN_IN_RESULT = OpSpec(
    "sign_in_result",
    {
        "sign_in_id": Field(str, max_len=SIGN_IN_ID_MAX),
        "wait": Field(float, required=False, min=0, max=RESULT_WAIT_MAX),
    },
    idempotent=True,
    timeout=RESULT_WAIT_MAX + 5.0,
    remote=Remote.ALLOWED,
)
STATUS = OpSpec("status", idempotent=True, timeout=5.0, remote=Remote.ALLOWED)
REFRESH = OpSpec(
    "refresh", {"force": Field(bool, required=False)}, idempotent=True, timeout=60.0, remote=Remote.WITH_GRANT
)
# A token is for the processes of this install alone, whatever a remote key is granted.
TOKEN = OpSpec("token", idempotent=True, timeout=60.0, remote=Remote.NEVER)

# Typed error codes of this service.
NOT_SIGNED_IN = "not_signed_in"
NEEDS_SIGN_IN = "needs_sign_in"
SIGN_IN_EXISTS = "sign_in_exists"
TOO_MANY_SIGN_INS = "too_many_sign_ins"
