"""Where the metrics listener may listen (loopback or a unix socket, typed refusals naming the
field) and what it answers a request line with, with no socket."""

from __future__ import annotations

import pytest

from hermes_cli.metrics.address import ListenAddress, MetricsListenInvalid, MetricsListenNotLoopback, parse
from hermes_cli.metrics.exposition import CONTENT_TYPE
from hermes_cli.metrics.listener import CachedScrape, _answer


@pytest.mark.parametrize(
    "value, address",
    [
        ("127.0.0.1:9464", ListenAddress("127.0.0.1", 9464)),
        ("127.1.2.3:0", ListenAddress("127.1.2.3", 0)),
        ("localhost:9464", ListenAddress("127.0.0.1", 9464)),
        ("[::1]:9464", ListenAddress("::1", 9464)),
        ("unix:/run/user/1000/metrics.sock", ListenAddress(None, 0, "/run/user/1000/metrics.sock")),
    ],
)
def test_a_loopback_address_or_a_unix_socket_is_taken(value, address):
    assert parse(value) == address


@pytest.mark.parametrize(
    "value", ["0.0.0.0:9464", "192.168.1.2:9464", "[::]:9464", "[2001:db8::1]:80", "example.com:9464"]
)
def test_an_address_other_hosts_could_reach_is_refused_naming_the_field(value):
    with pytest.raises(MetricsListenNotLoopback) as refused:
        parse(value)
    assert refused.value.code == "metrics_listen_not_loopback"
    assert refused.value.detail["field"] == "listen" and "--listen" in refused.value.message


@pytest.mark.parametrize(
    "value", ["9464", ":9464", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:x", "unix:rel.sock", "unix:/" + "a" * 120]
)
def test_an_address_that_is_none_is_invalid(value):
    with pytest.raises(MetricsListenInvalid) as invalid:
        parse(value)
    assert invalid.value.detail["field"] == "listen"


def cached(bodies: list[str]) -> tuple[CachedScrape, list[float]]:
    clock = [0.0]
    scrape = CachedScrape(lambda: bodies.pop(0), clock=lambda: clock[0])
    return scrape, clock


def test_get_and_head_of_metrics_answer_the_exposition_and_elsewhere_404():
    scrape, _ = cached(["# EOF\n"])
    assert _answer(b"GET /metrics HTTP/1.1", scrape) == ("200 OK", {"Content-Type": CONTENT_TYPE}, b"# EOF\n", True)
    assert _answer(b"HEAD /metrics?x=1 HTTP/1.0", scrape)[::3] == ("200 OK", False)
    assert _answer(b"GET / HTTP/1.1", scrape)[0] == "404 Not Found"
    assert _answer(b"POST /metrics HTTP/1.1", scrape)[0] == "405 Method Not Allowed"
    assert _answer(b"GET /metrics", scrape)[0] == "400 Bad Request"


def test_scrapes_within_the_cache_time_gather_once():
    scrape, clock = cached(["first", "second"])
    assert scrape.body() == b"first"
    clock[0] = 1.0
    assert scrape.body() == b"first"  # a storm of scrapes is one gathering
    clock[0] = 2.5
    assert scrape.body() == b"second"
