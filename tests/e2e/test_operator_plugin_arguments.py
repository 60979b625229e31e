"""Every argument of every tool, through the plugin host over a real simulator: a whole number
spelled as a float, or text holding a lone surrogate, is refused naming its JSON path, before
any daemon call, with nothing logged; and the host answers the next call as before."""

from __future__ import annotations

import json
import logging

import pytest

from hermes_cli.plugin_host import PluginHost
from shared.operator import protocol as p
from tests.support.operator_plugin import (
    argument_fields,
    arguments_around,
    install,
    payload,
    policy_fields,
    with_argument,
    write_policy,
)
from tests.support.operator_tools import ops, simulator

pytestmark = pytest.mark.slow

schemas = payload("schemas")
FIELDS = [
    (name, path, kind)
    for name in schemas.FULL_TOOLS
    for path, kind in argument_fields(schemas.SCHEMAS[name]["parameters"])
]
BAD = {"integer": 80.0, "string": "a\ud800b"}


@pytest.fixture(scope="module")
def plugged():
    """A home with the plugin installed under a full policy, its host, and one live session."""
    with simulator(reporter=False) as sim:
        policy = write_policy(sim.directory / "state" / "policy.json", policy_fields(sim.address, access_mode="full"))
        install(sim.root, policy)
        host = PluginHost.load(sim.root)
        assert set(host.tools) == set(schemas.FULL_TOOLS)
        yield sim, host, sim.start("target", agent="shell")["id"]


def dispatch(host, name, args):
    return json.loads(host.dispatch(name, args))


@pytest.mark.parametrize(("name", "path", "kind"), FIELDS, ids=[f"{n}:{p}" for n, p, _ in FIELDS])
def test_a_float_for_an_integer_or_a_lone_surrogate_is_refused_naming_it(plugged, caplog, capfd, name, path, kind):
    sim, host, session = plugged
    before = sum(ops(sim.daemon).values())
    with caplog.at_level(logging.DEBUG):
        answer = dispatch(host, name, with_argument(arguments_around(name, path, session), path, BAD[kind]))
    assert answer["ok"] is False
    assert (answer["error"]["code"], answer["error"]["detail"]) == ("plugin_invalid_request", {"field": path})
    assert sum(ops(sim.daemon).values()) == before
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    written = capfd.readouterr()
    assert "Traceback" not in written.out + written.err
    assert dispatch(host, "pohunek_session_get", {"session": session})["result"]["id"] == session


def test_a_key_with_a_lone_surrogate_is_named_escaped_and_the_answer_is_unicode(plugged):
    sim, host, session = plugged
    answer = host.dispatch("pohunek_session_get", {"session": session, "\ud800": 1})
    answer.encode("utf-8")  # a turn, a terminal and a log can carry it
    assert json.loads(answer)["error"]["detail"] == {"field": "\\ud800"}
    assert sim.daemon.call(p.SESSION_GET, {"host": "local", "session": session})["state"] == "running"
