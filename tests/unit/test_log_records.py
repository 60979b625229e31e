"""A log record as fields (the JSON line, the journal entry), secrets hidden in each; the
journal's native datagram; whether stderr is the journal."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from shared import logs
from shared.journal_protocol import BadFieldName, encode, entry, is_journal_stream
from shared.log_record import FIELDS, json_line, parse_format, priority, record_fields
from shared.redaction import MARKER

INSTANCE = "0123456789abcdef0123456789abcdef"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhY2NvdW50In0.c2lnbmF0dXJl"


def a_record(msg: str, *args: object, level: int = logging.INFO, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise RuntimeError(f"refresh failed with {JWT}")
        except RuntimeError:
            exc_info = sys.exc_info()
    return logging.LogRecord("services.gateway", level, "/x/app.py", 42, msg, args, exc_info, func="turn")


def test_a_json_line_is_one_object_with_every_field():
    fields = record_fields(a_record("served %d turns", 3), "gateway", INSTANCE, {"profile": "coder", "update_id": None})
    line = json_line(fields)
    assert "\n" not in line
    parsed = json.loads(line)
    assert set(FIELDS) <= set(parsed)
    assert parsed["message"] == "served 3 turns"
    assert (parsed["service"], parsed["profile"], parsed["instance_id"]) == ("gateway", "coder", INSTANCE)
    assert parsed["time"].endswith("Z") and parsed["time"][10] == "T"
    assert "exception" not in parsed


def test_secrets_are_hidden_in_the_message_args_exception_and_bound_fields():
    record = a_record("signed in as %s with %s", "anon_0123456789abcdefghij", f"Bearer {JWT}", exc=True)
    fields = record_fields(record, "auth_worker", INSTANCE, {"profile": f"token={JWT}", "update_id": None})
    line = json_line(fields)
    assert JWT not in line and "anon_0123456789abcdefghij" not in line
    assert MARKER in fields["message"] and MARKER in fields["exception"] and MARKER in fields["profile"]
    assert "RuntimeError: refresh failed with" in fields["exception"]


def test_a_multiline_exception_stays_one_json_line():
    line = json_line(record_fields(a_record("boom", exc=True), "updater", INSTANCE, {"update_id": "u1"}))
    assert len(line.splitlines()) == 1 and "Traceback" in json.loads(line)["exception"]


@pytest.mark.parametrize(
    "value, form", [("json", "json"), (" JSON ", "json"), ("text", "text"), ("xml", None), ("", None), (None, None)]
)
def test_a_format_is_text_or_json_in_any_case(value, form):
    assert parse_format(value) == form


@pytest.mark.parametrize(
    "level, prio",
    [(logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6), (logging.DEBUG, 7), (25, 6)],
)
def test_levels_map_to_syslog_priorities(level, prio):
    assert priority(level) == prio


def test_a_datagram_writes_plain_values_as_name_equals_value():
    assert encode([("MESSAGE", "hello"), ("PRIORITY", "6")]) == b"MESSAGE=hello\nPRIORITY=6\n"


def test_a_multiline_value_takes_the_binary_length_form():
    value = "line one\nline two ü"
    data = value.encode()
    assert encode([("MESSAGE", value)]) == b"MESSAGE\n" + len(data).to_bytes(8, "little") + data + b"\n"


def parse_datagram(datagram: bytes) -> dict[str, str]:
    """The journal's own reading of a native datagram (as journald parses it)."""
    fields, at = {}, 0
    while at < len(datagram):
        end = datagram.index(b"\n", at)
        head = datagram[at:end]
        if b"=" in head:
            name, value = head.split(b"=", 1)
            at = end + 1
        else:
            size = int.from_bytes(datagram[end + 1 : end + 9], "little")
            name, value = head, datagram[end + 9 : end + 9 + size]
            assert datagram[end + 9 + size : end + 10 + size] == b"\n"
            at = end + 10 + size
        fields[name.decode()] = value.decode()
    return fields


def test_a_records_entry_carries_the_hermes_fields_and_reads_back():
    record = a_record("drained: %s", "ok", level=logging.WARNING, exc=True)
    fields = record_fields(record, "gateway", INSTANCE, {"profile": "writer", "update_id": None})
    read = parse_datagram(encode(entry(fields, record)))
    assert read["HERMES_PROFILE"] == "writer" and read["HERMES_SERVICE"] == "gateway"
    assert read["HERMES_INSTANCE_ID"] == INSTANCE and "HERMES_UPDATE_ID" not in read
    assert (read["PRIORITY"], read["SYSLOG_IDENTIFIER"]) == ("4", "hermes-gateway")
    assert (read["CODE_FILE"], read["CODE_LINE"], read["CODE_FUNC"]) == ("/x/app.py", "42", "turn")
    assert read["MESSAGE"].startswith("drained: ok\nTraceback") and JWT not in read["MESSAGE"]


@pytest.mark.parametrize("name", ["_PID", "message", "1ABC", "A" * 65, "A-B", ""])
def test_a_bad_field_name_is_refused(name):
    with pytest.raises(BadFieldName):
        encode([(name, "x")])


@pytest.mark.parametrize(
    "value, matches",
    [
        ("8:1234", True),
        (" 8:1234\n", True),
        ("8:1235", False),
        ("9:1234", False),
        ("", False),
        (None, False),
        ("x", False),
    ],
)
def test_stderr_is_the_journal_only_when_the_stream_names_it(value, matches):
    assert is_journal_stream(value, 8, 1234) is matches


def test_an_activitys_profile_wins_over_the_processes(monkeypatch):
    monkeypatch.setattr(logs, "_bound", {"profile": "default", "update_id": None})
    monkeypatch.setattr(logs, "_activity", lambda: {"profile": "coder"})
    assert logs.current() == {"profile": "coder", "update_id": None}
    monkeypatch.setattr(logs, "_activity", lambda: {"profile": None})
    assert logs.current()["profile"] == "default"  # outside an activity, the process's
