"""The guest handoff's rules: every answer, the ladder, the 13-day window, leases and copy.

Pure functions on an injected clock: no sockets, no sleeping, no files.
"""

from __future__ import annotations

import copy

import pytest

from nous.guest_handoff.rules import (
    FINAL_CODES,
    LADDER,
    LEASE,
    NO_ACCOUNT,
    RULES_VERSION,
    WINDOW,
    WRONG_ACCOUNT,
    Answer,
    BadHandoffInput,
    copy_lines,
    due_at,
    is_due,
    new_record,
    note_replacement,
    public_view,
    rearm,
    record_answer,
    record_key,
    reserve,
    sign_in_lines,
    wake,
)
from shared.errors import HermesError

ANON = "anon_3f9c2d7e1b"
KEY = record_key(ANON)
ADA = "sub-ada"
BOB = "sub-bob"
T0 = 1_700_000_000.0

CLAIMED = Answer(200, "claimed", connectors=["github", "slack"])
TRANSIENT = Answer(503, "internal_error")

# Every code a test below feeds in: none may ever reach a line of copy.
CODES = {
    "claimed",
    "unknown_token",
    "already_retired",
    "rate_limited",
    "internal_error",
    "brand_new_code",
    "invalid_token",
    "transport",
    WRONG_ACCOUNT,
    NO_ACCOUNT,
    *FINAL_CODES,
}


def fresh(now: float = T0, email: str = "ada@example.com") -> dict:
    return new_record(key=KEY, profile="default", destination=ADA, email=email, now=now)


def reserved(record: dict | None = None, *, now: float = T0, holder: str = "w1") -> dict:
    out, reason = reserve(record or fresh(now), now=now, holder=holder, token_sub=ADA)
    assert reason is None
    return out


def test_record_key_is_a_hash_and_refuses_anything_but_a_guest_credential():
    assert KEY == record_key(ANON) and len(KEY) == 64 and ANON not in KEY
    assert record_key("anon_other") != KEY
    for bad in ("", "anon_", "ANON_x", "guest_anon_x", b"anon_x", None, 7):
        with pytest.raises(ValueError):
            record_key(bad)
    with pytest.raises(HermesError) as caught:
        record_key("nope_" + ANON)
    assert ANON not in str(caught.value)


def test_a_new_record_is_pending_due_now_and_never_keyed_by_the_credential():
    record = fresh()
    assert record["state"] == "pending" and record["attempts"] == 0
    assert is_due(record, now=T0) and not is_due(record, now=T0 - 1)
    assert record["connectors"] is None and record["rules_version"] == RULES_VERSION
    assert record["lines"] == ["Moving your guest apps to ada@example.com…"]
    with pytest.raises(BadHandoffInput):
        new_record(key=ANON, profile="default", destination=ADA, email="a@x", now=T0)
    with pytest.raises(BadHandoffInput):
        new_record(key=KEY, profile="default", destination="", email="a@x", now=T0)


def test_reserve_counts_the_attempt_and_holds_a_lease():
    record = fresh()
    out, reason = reserve(record, now=T0 + 5, holder="w1", token_sub=ADA)
    assert reason is None
    assert out["state"] == "reserved" and out["attempts"] == 1
    assert out["reserved_until"] == T0 + 5 + LEASE and out["reserved_by"] == "w1"
    assert out["updated_at"] == T0 + 5
    assert record["state"] == "pending" and record["attempts"] == 0  # the input is untouched


def test_claimed_records_what_moved_and_whether_to_refresh_the_token():
    out = record_answer(
        reserved(), Answer(200, "claimed", connectors=["github", "slack"], cohort_carried=True), now=T0 + 1
    )
    assert out["state"] == "claimed" and out["connectors"] == ["github", "slack"]
    assert out["refresh_token_after"] is True and out["last_code"] == "claimed"
    assert out["reserved_until"] is None and out["reserved_by"] is None and out["updated_at"] == T0 + 1
    assert out["lines"] == ["Moved your guest apps to ada@example.com: github, slack."]

    plain = record_answer(reserved(), Answer(200, "claimed", connectors=["github"]), now=T0 + 1)
    assert plain["refresh_token_after"] is False


def test_claimed_without_a_connectors_list_is_unknown_never_nothing_moved():
    unknown = record_answer(reserved(), Answer(200, "claimed"), now=T0 + 1)
    assert unknown["state"] == "claimed" and unknown["connectors"] is None
    assert unknown["lines"] == ["Your guest apps were moved to ada@example.com."]
    empty = record_answer(reserved(), Answer(200, "claimed", connectors=[]), now=T0 + 1)
    assert empty["connectors"] == []
    assert empty["lines"] == ["Your guest session had no connected apps to move."]


def test_a_200_with_another_status_is_not_a_success():
    out = record_answer(reserved(), Answer(200, "brand_new_code"), now=T0 + 1)
    assert out["state"] == "pending" and out["next_attempt_at"] == T0 + 1 + LADDER[0]


def test_unknown_token_on_the_first_attempt_is_gone_and_nothing_moved():
    out = record_answer(reserved(), Answer(410, "unknown_token"), now=T0 + 1)
    assert out["state"] == "gone" and out["probably_moved"] is False
    assert out["lines"] == ["Your guest session had expired; there were no apps left to move."]


def test_unknown_token_after_an_earlier_attempt_reads_probably_moved():
    first = record_answer(reserved(), TRANSIENT, now=T0 + 1)
    second = reserved(first, now=first["next_attempt_at"])
    out = record_answer(second, Answer(410, "unknown_token"), now=second["next_attempt_at"] + 2)
    assert out["attempts"] == 2 and out["state"] == "gone" and out["probably_moved"] is True
    assert out["lines"] == ["Your guest apps were probably already moved to ada@example.com."]


def test_already_retired_is_gone_and_probably_moved_even_first_time():
    out = record_answer(reserved(), Answer(410, "already_retired"), now=T0 + 1)
    assert out["state"] == "gone" and out["probably_moved"] is True and out["last_code"] == "already_retired"


@pytest.mark.parametrize(
    "code,status", [("client_not_allowed", 403), ("account_locked", 423), ("invalid_request", 400)]
)
def test_final_codes_fail_for_good(code, status):
    out = record_answer(reserved(), Answer(status, code), now=T0 + 1)
    assert out["state"] == "failed" and out["last_code"] == code
    assert out["lines"] == [
        "Your guest apps could not be moved to ada@example.com. Reconnect them from the new account."
    ]
    assert reserve(out, now=T0 + 10 * 86400, holder="w1", token_sub=ADA) == (out, "settled")
    assert rearm(out, now=T0 + 2) is out


@pytest.mark.parametrize(
    "answer,last_code",
    [
        (Answer(None), "transport"),
        (Answer(429, "rate_limited"), "rate_limited"),
        (Answer(500), "http_500"),
        (Answer(503, "internal_error"), "internal_error"),
        (Answer(409, "brand_new_code"), "brand_new_code"),
        (Answer(401, "invalid_token"), "invalid_token"),  # the caller's refresh did not help: retry
        (Answer(401, "unknown_token"), "unknown_token"),  # a 401 is about the Bearer, not the guest
        (Answer(502, "invalid_request"), "invalid_request"),  # a final code on a gateway error is not final
        (Answer(429, "unknown_token"), "unknown_token"),
    ],
)
def test_everything_else_retries_on_the_ladder(answer, last_code):
    out = record_answer(reserved(), answer, now=T0 + 1)
    assert out["state"] == "pending" and out["last_code"] == last_code
    assert out["next_attempt_at"] == T0 + 1 + LADDER[0]
    assert out["reserved_until"] is None and out["reserved_by"] is None
    assert out["rules_version"] == RULES_VERSION
    assert out["lines"] == [
        "Moving your guest apps to ada@example.com is taking longer than usual; it will keep trying."
    ]
    assert not is_due(out, now=T0 + 1 + LADDER[0] - 0.001) and is_due(out, now=T0 + 1 + LADDER[0])


def test_retry_after_is_honoured_only_when_longer_than_the_rung():
    longer = record_answer(reserved(), Answer(429, "rate_limited", retry_after=500.0), now=T0 + 1)
    assert longer["next_attempt_at"] == T0 + 1 + 500.0
    shorter = record_answer(reserved(), Answer(429, "rate_limited", retry_after=5.0), now=T0 + 1)
    assert shorter["next_attempt_at"] == T0 + 1 + LADDER[0]


def test_the_ladder_climbs_and_its_slowest_rung_repeats():
    record, now, waits = fresh(), T0, []
    for _ in range(len(LADDER) + 3):
        record = record_answer(reserved(record, now=now), Answer(None), now=now)
        waits.append(record["next_attempt_at"] - now)
        now = record["next_attempt_at"]
    assert waits == [30, 120, 600, 3600, 6 * 3600, 24 * 3600, 24 * 3600, 24 * 3600, 24 * 3600]


def test_a_retry_that_would_land_past_the_window_expires_the_record():
    out = record_answer(reserved(), Answer(429, "rate_limited", retry_after=WINDOW), now=T0 + 1)
    assert out["state"] == "expired"
    assert out["lines"] == ["Moving your guest apps gave up after 13 days. Reconnect them from the new account."]


def test_a_retry_landing_exactly_on_the_windows_end_is_still_made():
    out = record_answer(reserved(), Answer(429, "rate_limited", retry_after=WINDOW - 1), now=T0 + 1)
    assert out["state"] == "pending" and out["next_attempt_at"] == T0 + WINDOW
    assert reserve(out, now=T0 + WINDOW, holder="w1", token_sub=ADA)[1] is None


def test_the_whole_window_on_a_fake_clock():
    record, now, sent_at = fresh(), T0, []
    for _ in range(1000):
        record, reason = reserve(record, now=now, holder="w1", token_sub=ADA)
        if reason is not None:
            break
        sent_at.append(now)
        record = record_answer(record, Answer(503, "internal_error"), now=now + 0.5)
        now = record["next_attempt_at"]
    # Sends at 0, 30s, 2.5min, 12.5min, ~1.2h, ~7.2h, then daily: 12 more fit in 13 days.
    assert len(sent_at) == 18 == record["attempts"]
    expected, t, rung = [T0], T0, 0
    while True:
        t += 0.5 + LADDER[min(rung, len(LADDER) - 1)]
        rung += 1
        if t > T0 + WINDOW:
            break
        expected.append(t)
    assert sent_at == expected
    assert all(t <= T0 + WINDOW for t in sent_at)
    assert record["state"] == "expired" and reason == "settled"
    assert not is_due(record, now=T0 + WINDOW + 1)
    for later in (T0 + WINDOW, T0 + WINDOW + 1, T0 + 30 * 86400):
        assert reserve(record, now=later, holder="w2", token_sub=ADA) == (record, "settled")


def test_a_pending_record_found_after_the_window_expires_instead_of_sending():
    late = T0 + WINDOW + 1
    record = fresh()
    assert is_due(record, now=late)  # due, so a worker looks at it and closes it
    out, reason = reserve(record, now=late, holder="w1", token_sub=ADA)
    assert reason == "window_closed" and out["state"] == "expired" and out["attempts"] == 0
    assert out["lines"] == ["Moving your guest apps gave up after 13 days. Reconnect them from the new account."]
    on_the_edge, reason = reserve(record, now=T0 + WINDOW, holder="w1", token_sub=ADA)
    assert reason is None and on_the_edge["state"] == "reserved"


def test_a_crash_between_reservation_and_answer_is_due_again_after_the_lease():
    held = reserved(now=T0)
    assert held["lines"] == ["Moving your guest apps to ada@example.com…"]
    assert not is_due(held, now=T0 + LEASE - 1)
    assert reserve(held, now=T0 + LEASE - 1, holder="w2", token_sub=ADA) == (held, "reserved")
    # The holder died. After the lease it counts as pending and due, attempt still counted.
    assert is_due(held, now=T0 + LEASE)
    revived = rearm(held, now=T0 + LEASE)
    assert revived["state"] == "pending" and revived["attempts"] == 1 and revived["reserved_by"] is None
    assert is_due(revived, now=T0 + LEASE)
    again, reason = reserve(held, now=T0 + LEASE, holder="w2", token_sub=ADA)
    assert reason is None and again["attempts"] == 2 and again["reserved_by"] == "w2"
    out = record_answer(again, Answer(410, "unknown_token"), now=T0 + LEASE + 1)
    assert out["state"] == "gone" and out["probably_moved"] is True


def test_two_reservers_only_one_sends():
    record = fresh()
    first, reason = reserve(record, now=T0, holder="w1", token_sub=ADA)
    assert reason is None
    second, reason = reserve(first, now=T0 + 1, holder="w2", token_sub=ADA)
    assert reason == "reserved" and second is first
    # The holder itself may not send twice under one lease either.
    assert reserve(first, now=T0 + 1, holder="w1", token_sub=ADA)[1] == "reserved"


def test_a_late_answer_to_a_lost_lease_is_dropped():
    first = reserved(now=T0, holder="w1")
    taken, _ = reserve(first, now=T0 + LEASE, holder="w2", token_sub=ADA)
    assert record_answer(taken, Answer(410, "unknown_token"), now=T0 + LEASE + 1, holder="w1") is taken
    out = record_answer(taken, CLAIMED, now=T0 + LEASE + 2, holder="w2")
    assert out["state"] == "claimed"


def test_wrong_account_sends_nothing_and_parks_the_record():
    record = fresh()
    for sub, reason in ((BOB, WRONG_ACCOUNT), ("", NO_ACCOUNT), (None, NO_ACCOUNT)):
        parked, why = reserve(record, now=T0 + 1, holder="w1", token_sub=sub)
        assert why == reason
        assert parked["state"] == "parked" and parked["parked_reason"] == reason and parked["attempts"] == 0
        assert parked["lines"] == [
            "Moving your guest apps to ada@example.com waits until ada@example.com is signed in here again."
        ]
    assert record["attempts"] == 0 and record["state"] == "pending"


@pytest.mark.parametrize("sub", [BOB, None])
def test_a_parked_record_is_never_due_until_its_window_ends_then_expires(sub):
    parked, _ = reserve(fresh(), now=T0 + 1, holder="w1", token_sub=sub)
    assert due_at(parked) == T0 + WINDOW
    for now in (T0 + 1, T0 + 2, T0 + 86400, T0 + WINDOW - 1):
        assert not is_due(parked, now=now)
        # Asked anyway with the same account, nothing changes: no write, no new updated_at.
        assert reserve(parked, now=now, holder="w2", token_sub=sub) == (parked, "parked")
    assert is_due(parked, now=T0 + WINDOW)
    expired, reason = reserve(parked, now=T0 + WINDOW, holder="w2", token_sub=sub)
    assert reason == "window_closed" and expired["state"] == "expired" and expired["attempts"] == 0
    assert due_at(expired) is None


def test_the_bound_accounts_return_wakes_a_parked_record_and_nothing_else_does():
    parked, _ = reserve(fresh(), now=T0 + 1, holder="w1", token_sub=None)
    records = {KEY: parked}
    for sub in (BOB, None, ""):
        assert wake(records, sub=sub, now=T0 + 2) is records
    woken = wake(records, sub=ADA, now=T0 + 3)[KEY]
    assert woken["state"] == "pending" and woken["parked_reason"] is None and is_due(woken, now=T0 + 3)
    assert woken["lines"] == ["Moving your guest apps to ada@example.com…"]
    sent, reason = reserve(woken, now=T0 + 3, holder="w1", token_sub=ADA)
    assert reason is None and sent["state"] == "reserved" and sent["attempts"] == 1
    assert records[KEY] is parked  # the input is untouched
    # Only parked records wake: a pending one's ladder and a settled one stay as they were.
    waiting = record_answer(reserved(), TRANSIENT, now=T0 + 1)
    done = record_answer(reserved(), CLAIMED, now=T0 + 1)
    others = {KEY: waiting, "other": done}
    assert wake(others, sub=ADA, now=T0 + 2) is others


def test_a_parked_record_sends_at_once_for_its_own_accounts_bearer():
    parked, _ = reserve(fresh(), now=T0 + 1, holder="w1", token_sub=BOB)
    sent, reason = reserve(parked, now=T0 + 5, holder="w1", token_sub=ADA)
    assert reason is None and sent["state"] == "reserved" and sent["reserved_until"] == T0 + 5 + LEASE


def test_a_parked_record_is_rebound_by_a_sign_in_of_another_account():
    parked, _ = reserve(fresh(), now=T0 + 1, holder="w1", token_sub=BOB)
    bound = note_replacement({KEY: parked}, key=KEY, profile="default", destination=BOB, email="bob@x", now=T0 + 2)
    assert bound[KEY]["state"] == "pending" and bound[KEY]["destination"] == BOB
    assert reserve(bound[KEY], now=T0 + 2, holder="w1", token_sub=BOB)[1] is None


def test_a_record_an_older_build_wrote_loads_parks_and_wakes():
    old = {key: value for key, value in fresh().items() if key != "parked_reason"}
    old["rules_version"] = 1
    assert rearm(old, now=T0 + 1) is old and is_due(old, now=T0 + 1)
    parked, reason = reserve(old, now=T0 + 1, holder="w1", token_sub=BOB)
    assert reason == WRONG_ACCOUNT and parked["rules_version"] == RULES_VERSION
    assert wake({KEY: parked}, sub=ADA, now=T0 + 2)[KEY]["state"] == "pending"
    waiting = {**record_answer(reserved(), TRANSIENT, now=T0 + 1), "rules_version": 1}
    waiting.pop("parked_reason")
    assert wake({KEY: waiting}, sub=ADA, now=T0 + 2)[KEY] is waiting


def test_a_sign_in_that_waited_in_vain_says_where_the_outcome_will_show():
    held = public_view(reserved())
    (line,) = sign_in_lines(held)
    assert line.startswith("Moving your guest apps to ada@example.com is still under way")
    assert "status" in line and "hermes" not in line and "`" not in line
    done = public_view(record_answer(reserved(), CLAIMED, now=T0 + 1))
    assert sign_in_lines(done) == done["lines"]
    waiting = public_view(record_answer(reserved(), TRANSIENT, now=T0 + 1))
    assert sign_in_lines(waiting) == waiting["lines"]


def test_a_record_is_due_at_its_next_attempt_or_its_leases_end_and_a_finished_one_never():
    waiting = record_answer(reserved(), TRANSIENT, now=T0 + 1)
    assert due_at(waiting) == T0 + 1 + LADDER[0]
    assert due_at(reserved(now=T0 + 5)) == T0 + 5 + LEASE
    finished = [
        record_answer(reserved(), CLAIMED, now=T0 + 1),
        record_answer(reserved(), Answer(410, "unknown_token"), now=T0 + 1),
        record_answer(reserved(), Answer(403, "account_locked"), now=T0 + 1),
        record_answer(reserved(), Answer(429, "rate_limited", retry_after=WINDOW), now=T0 + 1),
    ]
    assert [due_at(r) for r in finished] == [None] * 4
    for record in (waiting, reserved(now=T0 + 5), *finished):
        at = due_at(record)
        for now in (T0, T0 + 1000, T0 + 20 * 86400):
            assert is_due(record, now=now) == (at is not None and now >= at)


def test_not_due_and_settled_reasons():
    waiting = record_answer(reserved(), TRANSIENT, now=T0 + 1)
    assert reserve(waiting, now=T0 + 2, holder="w1", token_sub=ADA) == (waiting, "not_due")
    done = record_answer(reserved(), CLAIMED, now=T0 + 1)
    assert reserve(done, now=T0 + 2, holder="w1", token_sub=ADA) == (done, "settled")


def test_claimed_is_never_reopened():
    done = record_answer(reserved(), CLAIMED, now=T0 + 1)
    for answer in (Answer(410, "unknown_token"), Answer(403, "account_locked"), Answer(None), CLAIMED):
        assert record_answer(done, answer, now=T0 + 2) is done
        assert record_answer(done, answer, now=T0 + 2, holder="w1") is done
    assert rearm(done, now=T0 + 2) is done
    assert rearm({**done, "rules_version": 0}, now=T0 + 2)["state"] == "claimed"
    records = {KEY: done}
    after = note_replacement(records, key=KEY, profile="work", destination=BOB, email="bob@example.com", now=T0 + 3)
    assert after[KEY] is done and after is not records


def test_gone_is_never_reopened_by_a_new_sign_in():
    gone = record_answer(reserved(), Answer(410, "already_retired"), now=T0 + 1)
    after = note_replacement({KEY: gone}, key=KEY, profile="work", destination=BOB, email="b@x", now=T0 + 2)
    assert after[KEY] is gone


def test_note_replacement_creates_a_missing_record_without_touching_the_input():
    other = {"some-key": {"state": "claimed"}}
    snapshot = copy.deepcopy(other)
    after = note_replacement(other, key=KEY, profile="default", destination=ADA, email="ada@example.com", now=T0)
    assert other == snapshot
    assert after["some-key"] == snapshot["some-key"]
    assert after[KEY]["state"] == "pending" and after[KEY]["destination"] == ADA


def test_note_replacement_same_destination_leaves_the_record_alone():
    pending = record_answer(reserved(), TRANSIENT, now=T0 + 1)
    after = note_replacement(
        {KEY: pending}, key=KEY, profile="work", destination=ADA, email="ada@example.com", now=T0 + 2
    )
    assert after[KEY] is pending


@pytest.mark.parametrize("make", ["pending", "reserved", "failed", "expired"])
def test_note_replacement_rebinds_to_whoever_signed_in_last(make):
    record = {
        "pending": lambda: record_answer(reserved(), TRANSIENT, now=T0 + 1),
        "reserved": lambda: reserved(),
        "failed": lambda: record_answer(reserved(), Answer(423, "account_locked"), now=T0 + 1),
        "expired": lambda: record_answer(reserved(), Answer(429, "rate_limited", retry_after=WINDOW), now=T0 + 1),
    }[make]()
    records = {KEY: record}
    snapshot = copy.deepcopy(records)
    now = T0 + 3600
    after = note_replacement(records, key=KEY, profile="work", destination=BOB, email="bob@example.com", now=now)
    assert records == snapshot
    bound = after[KEY]
    assert bound["state"] == "pending" and bound["destination"] == BOB and bound["profile"] == "work"
    assert bound["email"] == "bob@example.com" and bound["attempts"] == 0
    assert bound["reserved_until"] is None and bound["reserved_by"] is None
    assert bound["created_at"] == T0  # the guest identity's window does not restart
    assert is_due(bound, now=now)
    # Never to two: the earlier account's Bearer can no longer send.
    assert reserve(bound, now=now, holder="w1", token_sub=ADA)[1] == "wrong_account"
    assert reserve(bound, now=now, holder="w1", token_sub=BOB)[1] is None
    assert bound["lines"] == ["Moving your guest apps to bob@example.com…"]
    # The old binding's in-flight answer no longer changes anything.
    assert record_answer(bound, CLAIMED, now=now + 1) is bound


def test_rearm_reopens_an_older_builds_transient_failure():
    old = {
        **record_answer(reserved(), Answer(403, "account_locked"), now=T0 + 1),
        "last_code": "rate_limited",
        "rules_version": 0,
    }
    out = rearm(old, now=T0 + 7200)
    assert out["state"] == "pending" and out["next_attempt_at"] == T0 + 7200 and out["attempts"] == 1
    assert out["rules_version"] == RULES_VERSION and out["updated_at"] == T0 + 7200
    assert is_due(out, now=T0 + 7200)
    assert out["lines"] == [
        "Moving your guest apps to ada@example.com is taking longer than usual; it will keep trying."
    ]
    assert old["state"] == "failed"
    # Its ladder carries on where it stood.
    retried = record_answer(reserved(out, now=T0 + 7200), Answer(None), now=T0 + 7201)
    assert retried["next_attempt_at"] == T0 + 7201 + LADDER[1]


def test_rearm_keeps_final_failures_current_failures_and_closed_windows():
    failed = record_answer(reserved(), Answer(403, "client_not_allowed"), now=T0 + 1)
    for code in FINAL_CODES:
        old_final = {**failed, "last_code": code, "rules_version": 0}
        assert rearm(old_final, now=T0 + 2) is old_final
    current = {**failed, "last_code": "rate_limited"}
    assert rearm(current, now=T0 + 2) is current
    old_outside = {**failed, "last_code": "rate_limited", "rules_version": 0}
    assert rearm(old_outside, now=T0 + WINDOW + 1) is old_outside
    pending = fresh()
    assert rearm(pending, now=T0 + 5) is pending


def test_copy_never_shows_a_code_a_url_or_a_command():
    answers = [
        CLAIMED,
        Answer(200, "claimed"),
        Answer(200, "claimed", connectors=[]),
        Answer(410, "unknown_token"),
        Answer(410, "already_retired"),
        Answer(429, "rate_limited"),
        Answer(418, "brand_new_code"),
        Answer(401, "invalid_token"),
        Answer(None),
        *(Answer(403, code) for code in FINAL_CODES),
    ]
    records = [fresh(), reserved(), fresh(email=""), *(record_answer(reserved(), a, now=T0 + 1) for a in answers)]
    records.append(reserve(fresh(), now=T0 + WINDOW + 1, holder="w1", token_sub=ADA)[0])
    records += [
        reserve(fresh(email=email), now=T0, holder="w1", token_sub=sub)[0]
        for email in ("a@x", "")
        for sub in (BOB, None)
    ]
    lines = [line for r in records for line in copy_lines(r)] + sign_in_lines(public_view(reserved()))
    assert {r["state"] for r in records} == {"pending", "reserved", "claimed", "gone", "failed", "expired", "parked"}
    assert lines
    for line in lines:
        lowered = line.lower()
        assert not any(code in lowered for code in CODES), line
        assert "http" not in lowered and "hermes " not in lowered and "`" not in line, line
        assert ANON not in line and KEY not in line, line
    assert copy_lines(fresh(email="")) == ["Moving your guest apps to your new account…"]


def test_public_view_hides_the_key_the_destination_and_the_code():
    out = record_answer(reserved(), Answer(429, "rate_limited"), now=T0 + 1)
    view = public_view(out)
    assert set(view) == {
        "state",
        "email",
        "connectors",
        "probably_moved",
        "attempts",
        "created_at",
        "updated_at",
        "next_attempt_at",
        "lines",
    }
    assert view["state"] == "pending" and view["attempts"] == 1 and view["email"] == "ada@example.com"
    assert KEY not in repr(view) and "rate_limited" not in repr(view) and ADA not in repr(view)
    view["lines"].append("x")
    assert out["lines"] != view["lines"]  # a copy, not the record's own list
