"""Every error code of the product is written once, listed in docs/errors.md, and every error
class is in a family. The checks are tested themselves on planted classes."""

from __future__ import annotations

from shared.errors import HermesError
from shared.protocol import Code, TransportError
from tests.support import error_codes as codes
from tests.support.processes import ROOT


def test_no_code_is_written_for_two_meanings():
    assert codes.two_meanings(codes.all_definitions()) == {}


def test_the_code_page_is_the_generated_one():
    definitions = codes.all_definitions()
    page = (ROOT / codes.DOC).read_text()
    assert codes.undocumented(definitions, page) == []
    assert page == codes.render(definitions), "regenerate: python -m tests.support.error_codes > docs/errors.md"


def test_every_error_is_in_a_family_and_every_family_is_a_hermes_error():
    classes = codes.exceptions_of(codes.product_modules())
    assert codes.outside_families(classes) == []
    families = {cls.family for cls in classes if issubclass(cls, HermesError) and cls is not HermesError}
    assert all(family is not None and HermesError in family.__bases__ for family in families)
    assert len(families) > 10


def test_every_exception_outside_the_tree_says_why():
    assert codes.unmarked_outsiders(codes.exceptions_of(codes.product_modules())) == []


# --- the checks, on planted classes ------------------------------------------------------


class _PlantedFamily(HermesError, family=True):
    pass


class _SameCodeNewMeaning(_PlantedFamily):
    code = "confirmation_required"


class _NamesTheWireCode(_PlantedFamily):
    code = Code.INVALID_FIELD


class _InheritsItsCode(_SameCodeNewMeaning):
    pass


class _NewCode(_PlantedFamily):
    code = "planted_code_nobody_documented"


class _InNoFamily(HermesError):
    code = "planted_in_no_family"


class _FamilyUnderAFamily(TransportError, family=True):
    pass


class _Unmarked(Exception):
    pass


def test_a_code_written_again_for_a_new_meaning_is_found():
    planted = codes.class_definitions([_SameCodeNewMeaning])
    assert codes.two_meanings(codes.all_definitions() + planted) == {
        "confirmation_required": ["hermes_cli.errors.ConfirmationRequired", f"{__name__}._SameCodeNewMeaning"]
    }


def test_a_code_named_or_inherited_is_not_written_again():
    assert codes.class_definitions([_NamesTheWireCode, _InheritsItsCode]) == []
    assert codes.two_meanings(codes.all_definitions() + codes.class_definitions([_NamesTheWireCode])) == {}


def test_a_literal_code_at_a_call_is_written_there():
    import tests.unit.test_error_codes as this

    sites = list(codes.call_sites([this], codes.per_instance([_TakesItsCode])))
    assert [(s.code, s.literal) for s in sites] == [("invalid_field", True), ("invalid_field", False)]
    planted = codes.site_definitions(sites, {"invalid_field"})
    assert list(codes.two_meanings(codes.all_definitions() + planted)) == ["invalid_field"]


class _TakesItsCode(_PlantedFamily):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _planted_calls() -> list[HermesError]:
    return [_TakesItsCode("invalid_field", "written again"), _TakesItsCode(Code.INVALID_FIELD, "named")]


def test_an_undocumented_code_is_found():
    page = (ROOT / codes.DOC).read_text()
    planted = codes.class_definitions([_NewCode])
    assert codes.undocumented(codes.all_definitions() + planted, page) == ["planted_code_nobody_documented"]
    assert codes.render(codes.all_definitions() + planted) != page


def test_an_error_in_no_family_and_a_family_under_a_family_are_found():
    assert codes.outside_families([_InNoFamily, _FamilyUnderAFamily, _NewCode]) == [
        f"{__name__}._InNoFamily: in no family",
        f"{__name__}._FamilyUnderAFamily: a family under another error",
    ]


def test_an_exception_outside_the_tree_without_a_reason_is_found():
    assert codes.unmarked_outsiders([_Unmarked, _NewCode]) == [f"{__name__}._Unmarked"]
