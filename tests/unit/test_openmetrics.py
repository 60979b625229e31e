"""The OpenMetrics exposition and the install's metric families, read back by a real parser
(``prometheus_client``'s OpenMetrics parser), with no gateway: snapshots made by hand."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from hermes_cli.metrics import families
from hermes_cli.metrics.exposition import Family, Sample, histogram, render
from services.gateway.turn_stats import TurnStats


def parsed(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_an_exposition_ends_with_eof_and_says_type_unit_and_help():
    text = render([Family("hermes_x_seconds", "gauge", "what x is", (Sample("", {}, 1.5),), "seconds")])
    assert text.endswith("# EOF\n")
    family = parsed(text)["hermes_x_seconds"]
    assert (family.type, family.unit, family.documentation) == ("gauge", "seconds", "what x is")
    assert family.samples[0].value == 1.5


@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_any_label_value_and_help_text_reads_back_as_it_was(value):
    text = render([Family("hermes_x", "gauge", f"help {value}", (Sample("", {"profile": value}, 1),))])
    family = parsed(text)["hermes_x"]
    assert family.samples[0].labels == {"profile": value}
    assert family.documentation == f"help {value}"


def test_quotes_backslashes_and_newlines_are_escaped():
    text = render([Family("hermes_x", "gauge", "h", (Sample("", {"profile": 'a"b\\c\nd'}, 1),))])
    assert 'profile="a\\"b\\\\c\\nd"' in text


def test_a_counter_is_named_without_total_and_its_sample_with_it():
    family = parsed(render([Family("hermes_c", "counter", "h", (Sample("_total", {}, 3),))]))["hermes_c"]
    assert family.type == "counter" and [s.name for s in family.samples] == ["hermes_c_total"]


@given(st.lists(st.floats(min_value=0, max_value=400), max_size=30))
def test_a_turn_histogram_reads_back_with_its_invariants(times):
    stats = TurnStats()
    for seconds in times:
        stats.observe(seconds)
    latency = stats.to_dict()["latency"]
    samples = histogram({"profile": "a"}, latency["le"], latency["counts"], latency["sum"])
    assert samples is not None
    family = parsed(render([Family("hermes_h_seconds", "histogram", "h", samples, "seconds")]))["hermes_h_seconds"]
    buckets = [s for s in family.samples if s.name.endswith("_bucket")]
    count = next(s for s in family.samples if s.name.endswith("_count"))
    assert buckets[-1].labels["le"] == "+Inf" and buckets[-1].value == count.value == len(times)
    assert [b.value for b in buckets] == sorted(b.value for b in buckets)


@pytest.mark.parametrize(
    "bounds, counts, total",
    [
        ([0.1, 1.0], [1, 2], 1.0),  # no +Inf
        ([1.0, 0.1, "+Inf"], [1, 1, 2], 1.0),  # not ascending
        ([0.1, "+Inf"], [2, 1], 1.0),  # not cumulative
        ([0.1, "+Inf"], [1, 2, 3], 1.0),  # not as many
        ([0.1, "+Inf"], [1, 1.5], 1.0),  # not whole
        ([0.1, "+Inf"], [1, 2], -1.0),  # a negative sum
        (["x", "+Inf"], [1, 2], 1.0),
    ],
)
def test_a_histogram_that_is_not_one_gives_no_samples(bounds, counts, total):
    assert histogram({}, bounds, counts, total) is None


def gateway(profile: str, *, up: bool = True, **more) -> dict:
    return {
        "profile": profile,
        "up": up,
        "current_code": up,
        "health": {"state": "healthy" if up else "unknown", "why": None},
        "active_turns": 1 if up else None,
        "turns": TurnStats().to_dict() if up else None,
        "restarts": {"total": 2, "last_hour": 1} if up else None,
        **more,
    }


def snapshot(*gateways: dict, signin: dict | None = None) -> dict:
    return {
        "code_sha": "a" * 40,
        "gateways": list(gateways),
        "updates": {"success": 3, "rolled_back": 1},
        "owed": {"completion": 0, "fleet_restart": 2},
        "signin": signin or {"provider": "nous", "signed_in": True, "access_expires_in": 120.5},
        "errors": [],
    }


def value(families: dict, name: str, **labels) -> float | None:
    family_name = next(f for f in families if name in (f, f + "_total", f + "_count", f + "_sum", f + "_bucket"))
    for sample in families[family_name].samples:
        if sample.name == name and sample.labels == labels:
            return sample.value
    return None


def test_every_metric_of_a_snapshot_reads_back_under_its_stable_name():
    got = parsed(render(families.families(snapshot(gateway("coder"), gateway("writer", up=False)))))
    assert set(got) == set(families.METRICS)
    assert all(name.startswith(families.PREFIX) for name in got)
    assert value(got, "hermes_gateway_up", profile="coder") == 1
    assert value(got, "hermes_gateway_up", profile="writer") == 0
    assert value(got, "hermes_gateway_current_code", profile="writer") == 0
    assert value(got, "hermes_gateway_healthy", profile="coder") == 1
    assert value(got, "hermes_gateway_active_turns", profile="coder") == 1
    assert value(got, "hermes_gateway_active_turns", profile="writer") is None  # a down gateway says nothing more
    assert value(got, "hermes_gateway_restarts_total", profile="coder") == 2
    assert value(got, "hermes_gateway_turn_duration_seconds_count", profile="coder") == 0
    assert value(got, "hermes_updates_total", outcome="rolled_back") == 1
    assert value(got, "hermes_owed_obligations", kind="fleet_restart") == 2
    assert value(got, "hermes_signin_signed_in", provider="nous") == 1
    assert value(got, "hermes_signin_access_expiry_seconds", provider="nous") == 120.5


def test_not_signed_in_is_0_with_no_expiry():
    signed_out = {"provider": "nous", "signed_in": False, "access_expires_in": None}
    got = parsed(render(families.families(snapshot(signin=signed_out))))
    assert value(got, "hermes_signin_signed_in", provider="nous") == 0
    assert got["hermes_signin_access_expiry_seconds"].samples == []


def test_a_gateway_answer_of_another_shape_is_left_out_not_rendered_broken():
    odd = gateway("coder", turns={"latency": {"le": [1.0], "counts": [1], "sum": 1}}, restarts={"total": "x"})
    got = parsed(render(families.families(snapshot(odd))))
    assert got["hermes_gateway_turn_duration_seconds"].samples == []
    assert got["hermes_gateway_restarts"].samples == []
    assert value(got, "hermes_gateway_up", profile="coder") == 1


def test_the_docs_table_names_every_metric():
    table = families.render_table()
    for name, (kind, _, _) in families.METRICS.items():
        assert (f"{name}_total" if kind == "counter" else name) in table
