"""The updater's public face (``services.updater``): every name it shows resolves."""

from __future__ import annotations

import importlib

import services.updater as updater


def test_every_public_name_is_the_one_its_module_defines():
    for name in updater.__all__:
        value = getattr(updater, name)
        if name == "ops":
            assert value is importlib.import_module("services.updater.ops")
        else:
            assert getattr(importlib.import_module(value.__module__), name) is value, name


def test_a_name_the_face_does_not_show_is_not_there():
    assert not hasattr(updater, "run_update")  # private to the updater process
