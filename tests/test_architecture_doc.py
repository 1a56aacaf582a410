"""docs/architecture.md's checkable claims hold: its module tables name every module of the apps
and nothing that does not exist, its import arrows are the import-linter contracts, and no module
is kept at an old path to re-export another (a shim: a module whose body is only imports).

The checks read files (ast, tomllib): nothing is imported."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
APPS = ("scoring", "annotation", "judging", "analysis", "accounts", "mentalbench")
# A backticked path to a Python file, from the repository root.
PATH = re.compile(r"`([\w./-]+/[\w-]+\.py)`")


def _app_modules() -> set[str]:
    """Every module of the apps, package `__init__`s and migrations aside (the doc says so)."""
    return {
        file.relative_to(ROOT).as_posix()
        for app in APPS
        for file in (ROOT / app).rglob("*.py")
        if file.name != "__init__.py" and "migrations" not in file.relative_to(ROOT).parts
    }


def test_the_module_tables_name_every_module_and_only_modules_that_exist() -> None:
    named = set(PATH.findall(DOC.read_text()))
    missing = sorted(_app_modules() - named)
    assert not missing, f"modules docs/architecture.md does not name: {missing}"
    gone = sorted(path for path in named if not (ROOT / path).is_file())
    assert not gone, f"docs/architecture.md names files that do not exist: {gone}"


def is_shim(source: str) -> bool:
    """Whether a module's body is only imports (besides its docstring, `__all__` and
    `from __future__`): a file kept to hand on another module's names."""
    body = ast.parse(source).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    body = [
        node
        for node in body
        if not (isinstance(node, ast.ImportFrom) and node.module == "__future__")
        and not (
            isinstance(node, ast.Assign | ast.AnnAssign)
            and any(
                isinstance(target, ast.Name) and target.id == "__all__"
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            )
        )
    ]
    return bool(body) and all(isinstance(node, ast.Import | ast.ImportFrom) for node in body)


def test_no_module_only_re_exports_another() -> None:
    # Package __init__s hand on their callers' names by design; every other module does work.
    shims = sorted(path for path in _app_modules() if is_shim((ROOT / path).read_text()))
    assert not shims, f"modules whose body is only imports (import from the source): {shims}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('"""Old path."""\n\nfrom scoring.parsing import parse_scores  # noqa: F401\n', True),
        ("from __future__ import annotations\nfrom .a import b\n__all__ = ['b']\n", True),
        ('"""Nothing at all."""\n', False),
        ("from .a import b\n\n\ndef c():\n    return b\n", False),
        ("from .a import b\n\nLIMIT = 3\n", False),
    ],
)
def test_the_shim_check(source: str, expected: bool) -> None:
    assert is_shim(source) is expected


def test_the_import_arrows_are_the_import_linter_contracts() -> None:
    arrows = re.search(r"^(\w+(?:\s+←\s+\w+)+)$", DOC.read_text(), re.MULTILINE)
    assert arrows, "docs/architecture.md has no `a  ←  b  ←  c` line"
    layers = [name.strip() for name in arrows.group(1).split("←")]
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    forbidden: dict[str, set[str]] = {}
    for contract in config["contracts"]:
        assert contract["type"] == "forbidden", contract["name"]
        for source in contract["source_modules"]:
            forbidden.setdefault(source, set()).update(contract["forbidden_modules"])
    for position, layer in enumerate(layers):
        above = set(layers[position + 1 :])
        assert above <= forbidden.get(layer, set()), (
            f"{layer} may not import {sorted(above)} (docs/architecture.md), "
            f"but the contracts forbid only {sorted(forbidden.get(layer, set()))}"
        )
        below = set(layers[:position])
        assert not below & forbidden.get(layer, set()), f"{layer} may import {sorted(below)}"
