"""Reading another install's ``mesh keys show --json`` document: every entry checked, a bad one
named by its position only, junk only ever a typed error."""

from __future__ import annotations

import json

import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_cli.curve_import import MAX_DOCUMENT_BYTES, services_of
from shared.transport.curve_keys import CurveKeyInvalid


def _key() -> str:
    return zmq.curve_keypair()[0].decode()


# Fixed, not made per run: a document is a test's parameter, and every process that collects the
# suite (each parallel worker) must name its tests alike.
CLIENT = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"


def _document(services: object, **more: object) -> bytes:
    return json.dumps({"store": "/elsewhere", "client": CLIENT, "services": services, **more}).encode()


def test_a_show_document_gives_every_service_key():
    keys = {"updater": _key(), "gateway": _key(), "gateway@coder": _key()}
    assert services_of(_document(keys)) == {name: key.encode() for name, key in keys.items()}


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"\xff\xfe",
        b"[1, 2]",
        b'"services"',
        b"[" * 50_000,
        json.dumps({"client": "x"}).encode(),
        _document(["updater"]),
        _document({}),
        b" " * (MAX_DOCUMENT_BYTES + 1),
    ],
)
def test_a_document_that_is_not_a_show_document_is_refused(raw):
    with pytest.raises(CurveKeyInvalid):
        services_of(raw)


@pytest.mark.parametrize(
    ("services", "position", "field"),
    [
        ({"updater": "x" * 39 + ",", "gateway": _key()}, 1, "key"),  # 40 characters, not all Z85
        ({"gateway": _key(), "Bad/../name": _key()}, 2, "name"),
        ({"gateway": _key(), "updater": _key(), "hook_reporter": 40}, 3, "key"),
    ],
)
def test_a_bad_entry_is_named_by_its_position_and_never_echoed(services, position, field):
    with pytest.raises(CurveKeyInvalid) as caught:
        services_of(_document(services))
    assert caught.value.detail == {"entry": position, "field": field}
    assert "Bad/../name" not in caught.value.message and "x" * 39 not in caught.value.message


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=512),
        st.recursive(
            st.none() | st.text(max_size=8),
            lambda c: st.dictionaries(st.text(max_size=8), c, max_size=4) | st.lists(c, max_size=4),
        ).map(lambda v: json.dumps({"services": v}).encode()),
    )
)
def test_junk_is_only_ever_the_typed_error(raw):
    try:
        keys = services_of(raw)
    except CurveKeyInvalid:
        return
    assert keys and all(len(key) == 40 for key in keys.values())
