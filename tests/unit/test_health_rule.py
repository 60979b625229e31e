"""The health rule: what a probe turn's answer (or the error its call ended with) says of a
gateway, against the code expected of it and how long it must have run."""

from __future__ import annotations

import pytest

from fleet.health import HEALTHY, UNHEALTHY, UNKNOWN, judge
from shared.protocol import Code, RemoteError
from shared.transport.zmtp import ZmtpViolation

SHA = "a" * 40
OTHER = "b" * 40


def probe_answer(**changes) -> dict:
    return {"turn_id": "p1", "probe": True, "profile": "coder", "code_sha": SHA, "up_for": 12.0, **changes}


CASES = {
    "answered on the expected code, long enough": (probe_answer(), SHA, HEALTHY, None),
    "any code when none is expected": (probe_answer(code_sha=OTHER), None, HEALTHY, None),
    "exactly the window": (probe_answer(up_for=10), SHA, HEALTHY, None),
    "not yet run long enough": (probe_answer(up_for=3.2), SHA, UNKNOWN, "up 3 s; healthy after 10 s"),
    "on other code": (
        probe_answer(code_sha=OTHER),
        SHA,
        UNHEALTHY,
        "it runs bbbbbbbbbbbb, not the expected aaaaaaaaaaaa",
    ),
    "the turn failed": (RemoteError(Code.INTERNAL_ERROR, "boom"), SHA, UNHEALTHY, "probe turn failed (internal_error)"),
    "the turn never finished": (RemoteError(Code.TIMEOUT, "slow"), SHA, UNHEALTHY, "did not finish in time"),
    "it closed mid-turn": (RemoteError(Code.CONNECTION_RESET, "gone"), SHA, UNHEALTHY, "(connection_reset)"),
    "it broke the wire": (ZmtpViolation("frame", "bad flags"), SHA, UNHEALTHY, "(zmtp_violation)"),
    "draining": (RemoteError("draining", "no"), SHA, UNKNOWN, "takes no turn now (draining)"),
    "stopping": (RemoteError(Code.SHUTTING_DOWN, "no"), SHA, UNKNOWN, "(shutting_down)"),
    "gone before the probe": (RemoteError(Code.UNAVAILABLE, "no"), SHA, UNKNOWN, "(unavailable)"),
    "this client not granted a turn": (RemoteError(Code.OP_NOT_GRANTED, "no"), SHA, UNKNOWN, "may not ask"),
    "code from before probes": (RemoteError(Code.UNKNOWN_FIELD, "probe"), SHA, UNKNOWN, "before probe turns"),
    "an answer that is no probe's": ({"turn_id": "t1", "text": "x"}, SHA, UNHEALTHY, "not a probe turn's"),
    "not a map": ([1, 2], SHA, UNHEALTHY, "not a probe turn's"),
    "no code named": (probe_answer(code_sha=None), None, UNHEALTHY, "names no code"),
    "no time run": (probe_answer(up_for=None), SHA, UNHEALTHY, "no time it has run"),
    "a bool for a time": (probe_answer(up_for=True), SHA, UNHEALTHY, "no time it has run"),
    "a negative time": (probe_answer(up_for=-1.0), SHA, UNHEALTHY, "no time it has run"),
    "NaN for a time": (probe_answer(up_for=float("nan")), SHA, UNHEALTHY, "no time it has run"),
}


@pytest.mark.parametrize(("answer", "expected", "state", "why"), CASES.values(), ids=CASES.keys())
def test_a_probe_answer_is_judged(answer, expected, state, why):
    health = judge(answer, expected_sha=expected, min_healthy=10.0)
    assert health.state == state
    if why is None:
        assert health.why is None
    else:
        assert why in health.why


def test_a_window_of_zero_takes_a_gateway_that_just_started():
    assert judge(probe_answer(up_for=0.0), expected_sha=SHA, min_healthy=0.0).state == HEALTHY
