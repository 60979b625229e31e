"""A failed step's reason: people's words for our own errors, the type named only for a bug."""

from shared.errors import HermesError, failure_reason
from shared.homes import UnsafeRunDir


def test_our_own_error_is_its_message_without_a_class_name():
    said = failure_reason(UnsafeRunDir("refusing to use /h/run: it has mode 0755"))
    assert said == "refusing to use /h/run: it has mode 0755"
    assert "UnsafeRunDir" not in said and "Error" not in failure_reason(HermesError("the lock is held"))


def test_anything_else_is_a_bug_and_is_named_with_its_type():
    assert failure_reason(ValueError("bad unit")) == "ValueError: bad unit"
