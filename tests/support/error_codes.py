"""Every error code of the product, where each is written, and the page that lists them.

A code is written once: as a class's ``code``, as a name in a code namespace (the wire's
``Code`` classes), or as the literal argument of an error that takes its code per instance
(``RemoteError("...")``). Every other class that carries it inherits it or names where it is
written (``code = Code.INVALID_FIELD``). Two places writing the same code are two meanings.

``python -m tests.support.error_codes > docs/errors.md`` writes the page.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import sys
import textwrap
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

from shared.errors import HermesError
from tests.support.module_graph import parsed
from tests.support.processes import PACKAGES

DOC = Path("docs/errors.md")
# The wire's code namespaces, and the family whose errors carry their codes.
NAMESPACES = (("shared.protocol", "Code", "TransportError"), ("shared.operator.protocol", "Code", "OperatorError"))
# One code written in two places for one meaning, where the two may not share a class: a
# service never imports another service, and the operator simulator stands in for a daemon
# whose wire is its own.
SHARED_ACROSS_LAYERS = {
    "git_failed": frozenset({"services.updater.git.GitFailed", "simulators.operator_sim.worktrees.GitFailed"}),
}
# Written above an exception that is not a HermesError, saying why.
OUTSIDE_MARK = "# Not a HermesError:"


@dataclass(frozen=True, order=True)
class Definition:
    code: str
    family: str  # the family base's name
    owner: str  # where the code is written: a class, or a namespace's name
    what: str = ""  # the first line of the owner's docstring


def product_modules(packages: Iterable[str] = PACKAGES) -> list[ModuleType]:
    """Every module of ``packages``, imported (``__main__`` modules run their program: skipped)."""
    found = []
    for name in packages:
        package = importlib.import_module(name)
        found.append(package)
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            if not info.name.endswith(".__main__"):
                found.append(importlib.import_module(info.name))
    return found


def exceptions_of(modules: Iterable[ModuleType]) -> list[type[BaseException]]:
    """Every exception class defined in ``modules`` (not the ones they import)."""
    found: dict[str, type[BaseException]] = {}
    for module in modules:
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == module.__name__:
                found[_name(value)] = value
    return [found[name] for name in sorted(found)]


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().split("\n\n")[0].replace("\n", " ").strip()


def _family(cls: type[HermesError]) -> str:
    return cls.family.__name__ if cls.family is not None else cls.__name__ if cls is HermesError else "(none)"


def _written_code(cls: type[HermesError]) -> bool:
    """Whether ``cls`` writes its ``code`` as a literal (not inherited, not a name of another's)."""
    if "code" not in vars(cls):
        return False
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return True
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    for node in body:
        target = (
            node.target
            if isinstance(node, ast.AnnAssign)
            else node.targets[0]
            if isinstance(node, ast.Assign)
            else None
        )
        if isinstance(target, ast.Name) and target.id == "code":
            return isinstance(node.value, ast.Constant)
    return True


def class_definitions(classes: Iterable[type[BaseException]], known: set[str] | None = None) -> list[Definition]:
    """The codes classes write; given the ``known`` codes, also a code a class names
    (``code = ops.DRAINING``) that nothing else writes: that class's own (its module's constant)."""
    return [
        Definition(cls.code, _family(cls), _name(cls), _first_line(cls.__doc__))
        for cls in classes
        if issubclass(cls, HermesError)
        and "code" in vars(cls)
        and (_written_code(cls) or (known is not None and cls.code not in known))
    ]


def namespace_definitions(namespaces: Iterable[tuple[str, str, str]] = NAMESPACES) -> list[Definition]:
    found = []
    for module_name, holder, family in namespaces:
        namespace = getattr(importlib.import_module(module_name), holder)
        tree = ast.parse(textwrap.dedent(inspect.getsource(namespace)))
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                name = node.targets[0].id  # type: ignore[attr-defined]
                found.append(Definition(node.value.value, family, f"{module_name}.{holder}.{name}"))
    return found


def per_instance(classes: Iterable[type[BaseException]]) -> dict[str, type[HermesError]]:
    """The errors that take their code per instance (``__init__(self, code, ...)``), by name."""
    found = {}
    for cls in classes:
        if issubclass(cls, HermesError) and "__init__" in vars(cls):
            params = list(inspect.signature(cls.__init__).parameters)
            if params[1:2] == ["code"]:
                found[cls.__name__] = cls
    return found


@dataclass(frozen=True)
class CallSite:
    where: str  # path:line
    cls: type[HermesError]
    code: str
    literal: bool  # written here, not named


def call_sites(modules: Iterable[ModuleType], takers: dict[str, type[HermesError]]) -> Iterator[CallSite]:
    """Every construction of a per-instance error whose code can be read: a literal, or a name
    this module can resolve. A forwarded code (``exc.code``) is written elsewhere."""
    for module in modules:
        path = getattr(module, "__file__", None)
        if not path:
            continue
        for node in ast.walk(parsed(Path(path))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if called not in takers:
                continue
            arg, where = node.args[0], f"{Path(path).relative_to(Path.cwd())}:{node.lineno}"
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                yield CallSite(where, takers[called], arg.value, literal=True)
            elif (value := _resolve(module, arg)) is not None:
                yield CallSite(where, takers[called], value, literal=False)


def _resolve(module: ModuleType, node: ast.expr) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.insert(0, node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in vars(module):
        return None
    value = vars(module)[node.id]
    for part in parts:
        value = getattr(value, part, None)
    return value if isinstance(value, str) else None


def site_definitions(sites: Iterable[CallSite], known: set[str]) -> list[Definition]:
    """A literal at a call site is written there; a named code nothing else writes is the
    per-instance error's own (its module's constant)."""
    found = set()
    for site in sites:
        if site.literal or site.code not in known:
            found.add(Definition(site.code, _family(site.cls), _name(site.cls), _first_line(site.cls.__doc__)))
    return sorted(found)


def all_definitions() -> list[Definition]:
    return list(_product_definitions())


@cache
def _product_definitions() -> tuple[Definition, ...]:
    modules = product_modules()
    classes = exceptions_of(modules)
    written = class_definitions(classes) + namespace_definitions()
    own = written + [d for d in class_definitions(classes, {d.code for d in written}) if d not in written]
    sites = call_sites(modules, per_instance(classes))
    return tuple(sorted({*own, *site_definitions(sites, {d.code for d in own})}))


# --- the rules --------------------------------------------------------------------------


def two_meanings(definitions: Iterable[Definition]) -> dict[str, list[str]]:
    """Codes written in more than one place (beyond ``SHARED_ACROSS_LAYERS``): code -> owners."""
    owners: dict[str, set[str]] = defaultdict(set)
    for d in definitions:
        owners[d.code].add(d.owner)
    return {
        code: sorted(found)
        for code, found in sorted(owners.items())
        if len(found) > 1 and found != SHARED_ACROSS_LAYERS.get(code)
    }


def undocumented(definitions: Iterable[Definition], page: str) -> list[str]:
    return sorted({d.code for d in definitions if f"`{d.code}`" not in page})


def outside_families(classes: Iterable[type[BaseException]]) -> list[str]:
    """HermesErrors in no family, and families that are not directly under HermesError."""
    bad = []
    for cls in classes:
        if not issubclass(cls, HermesError) or cls is HermesError:
            continue
        if cls.family is None:
            bad.append(f"{_name(cls)}: in no family")
        elif cls.family is cls and HermesError not in cls.__bases__:
            bad.append(f"{_name(cls)}: a family under another error")
    return bad


def unmarked_outsiders(classes: Iterable[type[BaseException]]) -> list[str]:
    """Exceptions of the product outside the tree without a line saying why."""
    bad = []
    for cls in classes:
        if issubclass(cls, HermesError):
            continue
        lines, start = inspect.getsourcelines(sys.modules[cls.__module__])[0], inspect.getsourcelines(cls)[1]
        if not lines[start - 2].strip().startswith(OUTSIDE_MARK):
            bad.append(_name(cls))
    return bad


# --- the page ---------------------------------------------------------------------------

_INTRO = """\
# Error codes

Every error a hermes-mesh process reports carries a stable `code` that clients branch on (the
`--json` output's `error.code`, a wire `error` frame's `code`); the message is for people and
may change. Every error class belongs to one family, a base per domain, so a caller can catch a
whole domain (`except UpdateError`). A code is written in one place; a class that carries it
too inherits it or names that place.

This page is generated from the code (`python -m tests.support.error_codes > docs/errors.md`);
`tests/unit/test_error_codes.py` fails when it differs, when one code is written in two places,
or when an error is in no family. What each code means for a command or an op is on that
command's page ([protocol.md](protocol.md), [updates.md](updates.md), [cli.md](cli.md), ...).
"""


def render(definitions: Iterable[Definition]) -> str:
    by_family: dict[str, list[Definition]] = defaultdict(list)
    for d in definitions:
        by_family[d.family].append(d)
    out = [_INTRO]
    for family in sorted(by_family):
        out.append(f"\n## {family}\n\n| code | written in | what |\n|---|---|---|\n")
        for d in sorted(by_family[family]):
            out.append(f"| `{d.code}` | `{d.owner}` | {d.what.replace('|', '/')} |\n")
    return "".join(out)


if __name__ == "__main__":
    sys.stdout.write(render(all_definitions()))
