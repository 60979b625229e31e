"""The auth worker's memory of how sign-ins ended: bounded in number and in age. Pure: the
time is passed in."""

from __future__ import annotations

from services.auth_worker.outcomes import KEEP_SECONDS, MAX_KEPT, Outcomes

DONE = {"state": "Completed", "email": "ada@example.com"}


def test_an_ended_sign_in_is_known_by_its_id_and_no_other():
    outcomes = Outcomes()
    assert outcomes.get("s1", now=0.0) is None
    outcomes.record("s1", DONE, now=0.0)
    assert outcomes.get("s1", now=1.0) == DONE
    assert outcomes.get("s2", now=1.0) is None


def test_an_outcome_is_forgotten_once_it_is_older_than_the_age_limit():
    outcomes = Outcomes()
    outcomes.record("s1", DONE, now=0.0)
    outcomes.record("s2", DONE, now=10.0)
    assert KEEP_SECONDS == 15 * 60
    assert outcomes.get("s1", now=KEEP_SECONDS) == DONE  # the limit itself still counts
    assert outcomes.get("s1", now=KEEP_SECONDS + 1) is None
    assert outcomes.get("s2", now=KEEP_SECONDS + 1) == DONE
    assert len(outcomes) == 1


def test_past_the_cap_the_oldest_is_forgotten_first():
    outcomes = Outcomes()
    for index in range(MAX_KEPT + 3):
        outcomes.record(f"s{index}", {"state": "Cancelled", "n": index}, now=float(index))
    assert MAX_KEPT == 64 and len(outcomes) == MAX_KEPT
    assert [outcomes.get(f"s{i}", now=100.0) for i in range(3)] == [None, None, None]
    assert outcomes.get("s3", now=100.0) == {"state": "Cancelled", "n": 3}
    assert outcomes.get(f"s{MAX_KEPT + 2}", now=100.0) == {"state": "Cancelled", "n": MAX_KEPT + 2}


def test_recording_an_id_again_keeps_the_new_state_as_the_newest():
    outcomes = Outcomes(cap=2)
    outcomes.record("a", {"state": "Cancelled"}, now=0.0)
    outcomes.record("b", DONE, now=1.0)
    outcomes.record("a", DONE, now=2.0)
    outcomes.record("c", DONE, now=3.0)  # "b" is now the oldest
    assert (outcomes.get("a", now=3.0), outcomes.get("b", now=3.0)) == (DONE, None)
