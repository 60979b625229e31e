"""The launch gate's grammar for ``hermes --version`` and its supported range [0.20.0, 1.0.0)."""

from __future__ import annotations

import pytest

from shared.operator import version_probe
from shared.operator.version_probe import VersionProbeError


@pytest.mark.parametrize(
    "text,version",
    [
        ("Hermes Agent v0.20.0 (2026.8.3)\n", (0, 20, 0)),
        ("Hermes Agent v0.99.99 (dev build)", (0, 99, 99)),
        ("Hermes Agent v0.20.1 (2026.8.3)\nProject: /home/x\nPython: 3.11\n", (0, 20, 1)),
        ("Hermes Agent v0.20.0 (2026.8.3)\r\nmore\r\n", (0, 20, 0)),
        ("Hermes Agent v0.20.0 (2026.8.3) · hermes-mesh 0.1.0 · 0123456789ab\n", (0, 20, 0)),
        ("Hermes Agent v0.20.0 (2026.8.3) · ", (0, 20, 0)),
    ],
)
def test_supported_versions_pass_and_later_lines_are_free(text, version):
    assert version_probe.parse_version(text) == version
    assert version_probe.check(text) == version


@pytest.mark.parametrize(
    "text",
    [
        "",
        "garbage",
        "\nHermes Agent v0.20.0 (2026.8.3)",  # not the first line
        "Hermes Agent v0.20.0",  # no parenthesis
        "Hermes Agent v0.20.0 ()",
        "Hermes Agent v0.20.0 (2026.8.3) trailing",
        "Hermes Agent v0.20.0 (2026.8.3)· hermes-mesh",  # the separator is space, dot, space
        "Hermes Agent v0.20.0 (2026.8.3) (hermes-mesh 0.1.0)",
        "Hermes Agent v0.20.0 (2026.8.3 (nested))",
        "Hermes Agent v0.20.0-rc1 (2026.8.3)",
        "Hermes Agent v0.20.0+build5 (2026.8.3)",
        "Hermes Agent v00.20.0 (2026.8.3)",
        "Hermes Agent v0.020.0 (2026.8.3)",
        "Hermes Agent v0.20 (2026.8.3)",
        "Hermes Agent 0.20.0 (2026.8.3)",
        "hermes agent v0.20.0 (2026.8.3)",
        " Hermes Agent v0.20.0 (2026.8.3)",
        "Hermes Agent v0.20.0 (2026.8.3\n)",
        "Hermes Agent v0.20.0 (2026.8.3)" + "\n" + "x" * 4096,  # over 4096 bytes
    ],
)
def test_unreadable_output_is_refused(text):
    with pytest.raises(VersionProbeError) as caught:
        version_probe.check(text)
    assert caught.value.code == "version_unreadable"


def test_the_size_bound_counts_bytes_not_characters():
    head = "Hermes Agent v0.20.0 (2026.8.3)\n"  # 32 bytes
    exactly = head + "é" * 2032  # 2,064 characters, 4,096 bytes
    assert version_probe.parse_version(exactly) == (0, 20, 0)
    with pytest.raises(VersionProbeError):
        version_probe.parse_version(exactly + "x")


@pytest.mark.parametrize("version,dotted", [((0, 19, 9), "0.19.9"), ((1, 0, 0), "1.0.0"), ((2, 3, 4), "2.3.4")])
def test_a_version_outside_the_range_is_unsupported_with_the_range_in_detail(version, dotted):
    text = f"Hermes Agent v{dotted} (2026.8.3)"
    assert version_probe.parse_version(text) == version
    with pytest.raises(VersionProbeError) as caught:
        version_probe.check(text)
    assert caught.value.code == "agent_runtime_unsupported"
    assert caught.value.detail == {"version": dotted, "min": "0.20.0", "below": "1.0.0"}


def test_the_range_is_half_open():
    assert version_probe.accepts((0, 20, 0))
    assert version_probe.accepts((0, 999, 999))
    assert not version_probe.accepts((0, 19, 999))
    assert not version_probe.accepts((1, 0, 0))
    assert version_probe.accepts((1, 0, 0), minimum=(1, 0, 0), below=(2, 0, 0))


def test_the_parser_name_is_the_one_a_package_declares():
    assert version_probe.PARSER == "hermes-agent-v1"
