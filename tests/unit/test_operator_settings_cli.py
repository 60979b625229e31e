"""The policy's ``operator_cli`` as install and update write it: the flag when given (an
absolute path, or ``hermes_invalid_policy`` naming the field), else what the installed policy
holds, else the ``hermes-operator`` beside the installing interpreter."""

from __future__ import annotations

import os
import sys

import pytest

from hermes_cli.operator import settings
from shared.operator.policy import InvalidPolicy

ENDPOINT = "ipc:///run/pohunek/daemon.sock"


def build(operator_cli=None, installed=None):
    return settings.build(
        bounds={},
        access_mode="manage",
        hosts=["local"],
        confirm_wildcard=False,
        endpoint=ENDPOINT,
        installed=installed,
        operator_cli=operator_cli,
    )


def test_the_flag_sets_the_operator_cli_and_update_keeps_it():
    given = build("/opt/mesh/bin/hermes-operator")
    assert given.operator_cli == "/opt/mesh/bin/hermes-operator"
    assert build(installed=given).operator_cli == "/opt/mesh/bin/hermes-operator"
    assert build("/usr/local/bin/hermes-operator", installed=given).operator_cli == "/usr/local/bin/hermes-operator"


@pytest.mark.parametrize("value", ["hermes-operator", "bin/hermes-operator", "", "/bin/x\nother"])
def test_a_flag_that_is_not_an_absolute_path_is_refused_naming_the_field(value):
    with pytest.raises(InvalidPolicy) as caught:
        build(value)
    assert caught.value.detail["field"] == "operator_cli"


def test_without_the_flag_install_records_the_operator_cli_beside_its_interpreter():
    beside = os.path.join(os.path.dirname(sys.executable), "hermes-operator")
    assert os.access(beside, os.X_OK), "the checkout installs hermes-operator beside its interpreter"
    assert build().operator_cli == beside


def test_the_policy_file_holds_the_operator_cli():
    assert b'"operator_cli": "/opt/mesh/bin/hermes-operator"' in settings.encode(build("/opt/mesh/bin/hermes-operator"))
