"""Two rules of docs/architecture.md, checked on every module of the apps (migrations aside):

- A module's underscore names are its own: no module imports another module's private name
  (`from x import _name`) or reads one through a module (`x._name`), a package's own
  submodules included. Dunder names are public.
- Settings come from the environment in `mentalbench/settings.py` only; everywhere else reads
  `django.conf.settings`. The one exception is the deliberate lookup of the environment
  variable an admin named as an endpoint's API key, `judging.api_keys.environment_value`.

The checks parse the source (ast): nothing is imported, so a violation in a module that no test
imports is found too. Each finding names file:line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APPS = ("mentalbench", "scoring", "annotation", "judging", "analysis", "accounts")
SETTINGS = "mentalbench/settings.py"
# (file, function) whose body may read the environment.
ENV_READERS = {("judging/api_keys.py", "environment_value")}
ENV_NAMES = {"environ", "environb", "getenv", "getenvb"}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_name(path: str) -> str:
    parts = list(Path(path).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(dotted: str) -> bool:
    """Whether `dotted` names a first-party module or package (a file under the apps)."""
    if dotted.split(".")[0] not in APPS:
        return False
    base = ROOT.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _resolve(path: str, level: int, module: str | None) -> str:
    """The absolute module a `from` import at `path` names."""
    if not level:
        return module or ""
    package = _module_name(path).split(".")
    if not path.endswith("__init__.py"):
        package.pop()
    package = package[: len(package) - (level - 1)]
    return ".".join(package + ([module] if module else []))


def find_violations(source: str, path: str) -> list[str]:
    """'path:line: what' for each break of the two rules in `source`, the text of the module at
    `path` (relative to the repository root, '/'-separated)."""
    tree = ast.parse(source, filename=path)
    me = _module_name(path)
    found: list[str] = []
    modules: dict[str, str] = {}  # local name -> first-party module it is bound to
    os_names: set[str] = set()  # local names of the os module
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "os" or (alias.name.startswith("os.") and not alias.asname):
                    os_names.add(alias.asname or "os")  # `import os.path` binds os too
                elif _is_module(alias.name):
                    local = alias.asname or alias.name.split(".")[0]
                    modules[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom):
            source_module = _resolve(path, node.level, node.module)
            for alias in node.names:
                if source_module == "os" and alias.name in ENV_NAMES:
                    found.append(f"{path}:{node.lineno}: imports os.{alias.name}")
                full = f"{source_module}.{alias.name}"
                if _is_module(full):
                    modules[alias.asname or alias.name] = full
                if (
                    _is_private(alias.name)
                    and source_module.split(".")[0] in APPS
                    and source_module != me
                ):
                    found.append(f"{path}:{node.lineno}: imports private {full}")
    env_allowed: set[int] = set()  # ids of nodes inside a function allowed to read
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (
            (path, node.name) in ENV_READERS
        ):
            env_allowed.update(id(inner) for inner in ast.walk(node))
        # os.environ.setdefault("DJANGO_SETTINGS_MODULE", ...) writes a default for Django itself.
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "setdefault"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == "DJANGO_SETTINGS_MODULE"
        ):
            env_allowed.add(id(node.func.value))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        if (
            node.attr in ENV_NAMES
            and isinstance(node.value, ast.Name)
            and node.value.id in os_names
            and path != SETTINGS
            and id(node) not in env_allowed
        ):
            found.append(f"{path}:{node.lineno}: reads the environment ({ast.unparse(node)})")
        if _is_private(node.attr):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in modules:
                target = ast.unparse(node.value).replace(root.id, modules[root.id], 1)
                if target != me:
                    found.append(f"{path}:{node.lineno}: uses private {target}.{node.attr}")
    return found


def _app_modules() -> list[Path]:
    return sorted(
        file
        for app in APPS
        for file in (ROOT / app).rglob("*.py")
        if "migrations" not in file.relative_to(ROOT).parts
    )


def test_no_private_names_cross_modules_and_only_settings_reads_the_environment() -> None:
    findings = [
        finding
        for file in _app_modules()
        for finding in find_violations(file.read_text(), file.relative_to(ROOT).as_posix())
    ]
    assert not findings, "\n".join(["private names or environment reads:", *findings])


@pytest.mark.parametrize(
    ("path", "source", "expected"),
    [
        (
            "judging/views.py",
            "from judging.services.engine import _Plan\n",
            ["judging/views.py:1: imports private judging.services.engine._Plan"],
        ),
        (
            "judging/services/batch.py",
            "from .engine import _Plan, RunPlan\n",
            ["judging/services/batch.py:1: imports private judging.services.engine._Plan"],
        ),
        (
            "judging/services/batch.py",
            "from .. import providers\n\nproviders._messages()\n",
            ["judging/services/batch.py:3: uses private judging.providers._messages"],
        ),
        (
            "judging/tasks.py",
            "import judging.services\n\njudging.services.engine._call()\n",
            ["judging/tasks.py:3: uses private judging.services.engine._call"],
        ),
        (
            "judging/tasks.py",
            "from judging import services as s\n\ns.claims._stale_before()\n",
            ["judging/tasks.py:3: uses private judging.services.claims._stale_before"],
        ),
        (
            "judging/tasks.py",
            "import os\n\nos.environ.get('X')\n",
            ["judging/tasks.py:3: reads the environment (os.environ)"],
        ),
        (
            "judging/tasks.py",
            "import os as o\n\nx = o.environ['X']\ny = o.getenv('Y')\n",
            [
                "judging/tasks.py:3: reads the environment (o.environ)",
                "judging/tasks.py:4: reads the environment (o.getenv)",
            ],
        ),
        (
            "judging/tasks.py",
            "from os import environ\n",
            ["judging/tasks.py:1: imports os.environ"],
        ),
        (
            "judging/tasks.py",
            "import os.path\n\n'X' in os.environ\n",
            ["judging/tasks.py:3: reads the environment (os.environ)"],
        ),
        (
            "judging/api_keys.py",
            "import os\n\ndef other(name):\n    return os.environ.get(name)\n",
            ["judging/api_keys.py:4: reads the environment (os.environ)"],
        ),
    ],
)
def test_the_check_finds(path: str, source: str, expected: list[str]) -> None:
    assert sorted(find_violations(source, path)) == sorted(expected)


@pytest.mark.parametrize(
    ("path", "source"),
    [
        # A module's own private names, dunders, and private attributes of classes (Django's
        # _meta) rather than of modules.
        ("judging/tasks.py", "def _x():\n    pass\n\n_x()\n"),
        (
            "judging/tasks.py",
            "from judging import __name__ as n\nimport judging\n\njudging.__doc__\n",
        ),
        ("judging/tasks.py", "from .models import RunItem\n\nRunItem._meta.db_table\n"),
        # Another library's private names are its business.
        ("judging/tasks.py", "from django.db.models.sql.compiler import _AsSqlType\n"),
        (
            "mentalbench/wsgi.py",
            "import os\n\nos.environ.setdefault('DJANGO_SETTINGS_MODULE', 'm')\n",
        ),
        ("mentalbench/settings.py", "import os\nDEBUG = os.environ.get('DEBUG')\n"),
        (
            "judging/api_keys.py",
            "import os\n\ndef environment_value(name):\n    return os.environ.get(name)\n",
        ),
    ],
)
def test_the_check_allows(path: str, source: str) -> None:
    assert find_violations(source, path) == []
