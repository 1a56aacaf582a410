"""Three rules of docs/architecture.md:

- A module's underscore names are its own: no module imports another module's private name
  (`from x import _name`), reads one through a module (`x._name`) or patches one
  (`mock.patch("x._name")`, `monkeypatch.setattr(x, "_name", …)`), a package's own submodules
  included. Dunder names are public. Checked on every module of the apps (migrations aside),
  of tests/ and of benchmarks/: a test or benchmark that needs a private name tests through the
  public one instead, or the name becomes public.
- Settings come from the environment in `mentalbench/settings.py` only; everywhere else in the
  apps reads `django.conf.settings` (tests and benchmarks set up environments, so they may).
  The one exception is the deliberate lookup of the environment variable an admin named as an
  endpoint's API key, `judging.api_keys.environment_value`.
- The public functions of services and selectors modules (`services.py`, `services/*.py`,
  `*selectors*.py` in the apps) take keyword arguments only: a call names what it passes, so two
  arguments of one type cannot be swapped unseen, and a parameter can be added or reordered
  without reading every caller. Methods, nested functions and private helpers are free.
- Reads never write ("Services write, selectors read"): a selector module (`*selectors*.py`),
  an export (`analysis/export.py`, `copy_export.py`, `copy_read.py`, `release.py`) or the
  pseudonyms every export names clinicians through (`analysis/pseudonyms.py`) calls no ORM
  write (`save()`, `create`, `bulk_create`, `update(field=…)`, `delete()`, `select_for_update`,
  `get_or_create`, `update_or_create`, …), no `*_ensure` or `*_assign` function and imports
  nothing from a services module; a view or API module (`views.py`, `*_views.py`, `api.py`)
  calls no ORM write itself (it calls a service). The exceptions are WRITES_ALLOWED, each with
  its reason. tests/analysis/test_reads_only.py proves the rule at run time: the first views of
  a freshly imported study send no INSERT, UPDATE or DELETE.

The checks parse the source (ast): nothing is imported, so a violation in a module that no test
imports is found too. Each finding names file:line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APPS = ("mentalbench", "scoring", "annotation", "judging", "analysis", "accounts")
# First-party packages whose private names are their own; only the apps' environment reads count.
PACKAGES = (*APPS, "tests", "benchmarks")
SETTINGS = "mentalbench/settings.py"
# (file, function) whose body may read the environment.
ENV_READERS = {("judging/api_keys.py", "environment_value")}
ENV_NAMES = {"environ", "environb", "getenv", "getenvb"}
# Modules that show data and only read it, whatever they are called from.
READERS = {
    "analysis/export.py",
    "analysis/copy_export.py",
    "analysis/copy_read.py",
    "analysis/pseudonyms.py",
    "analysis/release.py",
}
# ORM calls that write or lock rows for writing, whatever their arguments.
ORM_WRITES = {
    "create",
    "bulk_create",
    "bulk_update",
    "get_or_create",
    "update_or_create",
    "select_for_update",
}
# Names ending so are services that write (responders_ensure, rater_codes_assign).
WRITER_SUFFIXES = ("_ensure", "_assign")
# (file, function or import) → why it may write, or import a services module, all the same.
WRITES_ALLOWED = {
    # The clinician's own credentials page saves its ModelForm: the page exists to write it.
    ("annotation/views.py", "credentials"): "a form page that saves its own form",
    # consent_refusal reads (the gate every write asks through): a selector, kept beside the
    # consent services whose rule it is.
    ("annotation/selectors.py", "annotation.services.consent"): "consent_refusal only reads",
}
# Calls that replace an attribute: mock.patch("a.b._c"), mock.patch.object(m, "_c"),
# monkeypatch.setattr(m, "_c", …) or ("a.b._c", …), monkeypatch.delattr(…).
PATCHERS = {"patch", "object", "setattr", "delattr"}
# The apps whose services and selectors modules take keyword arguments only.
SERVICE_APPS = ("annotation", "judging", "analysis", "accounts")
# (file, function) of a services or selectors module that may take a parameter by position, each
# with the calling convention (a framework's, a callback's) that needs it.
POSITIONAL_ALLOWED: dict[tuple[str, str], str] = {
    # (path, function): why it must take a parameter by position. None does today.
}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_name(path: str) -> str:
    parts = list(Path(path).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(dotted: str) -> bool:
    """Whether `dotted` names a first-party module or package (a file under the apps)."""
    if dotted.split(".")[0] not in PACKAGES:
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
    nodes = list(ast.walk(tree))  # walked once, read four times
    me = _module_name(path)
    found: list[str] = []
    modules: dict[str, str] = {}  # local name -> first-party module it is bound to
    os_names: set[str] = set()  # local names of the os module
    for node in nodes:
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
                    and source_module.split(".")[0] in PACKAGES
                    and source_module != me
                ):
                    found.append(f"{path}:{node.lineno}: imports private {full}")
    env_allowed: set[int] = set()  # ids of nodes inside a function allowed to read
    for node in nodes:
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
    for node in nodes:
        if not isinstance(node, ast.Attribute):
            continue
        if (
            node.attr in ENV_NAMES
            and isinstance(node.value, ast.Name)
            and node.value.id in os_names
            and path != SETTINGS
            and path.split("/")[0] in APPS
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
    for node in nodes:
        patched = _patched(node, modules)
        if patched and patched[0] != me and patched[0].split(".")[0] in PACKAGES:
            found.append(f"{path}:{node.lineno}: patches private {'.'.join(patched)}")
    return found


def _patched(node: ast.AST, modules: dict[str, str]) -> tuple[str, str] | None:
    """(module, private name) that a patching call replaces, if `node` is one."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if name not in PATCHERS:
        return None
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str) and "." in first.value:
        module, _, attr = first.value.rpartition(".")
        return (module, attr) if _is_private(attr) else None
    second = node.args[1] if len(node.args) > 1 else None
    if not (isinstance(second, ast.Constant) and isinstance(second.value, str)):
        return None
    if not _is_private(second.value):
        return None
    root = first
    while isinstance(root, ast.Attribute):
        root = root.value
    if not (isinstance(root, ast.Name) and root.id in modules):
        return None
    return ast.unparse(first).replace(root.id, modules[root.id], 1), second.value


#: Services modules named for what they serve rather than "services".
SERVICE_MODULES_NAMED = frozenset({"accounts/users.py", "annotation/rater_codes.py"})


def is_service_or_selector(path: str) -> bool:
    """Whether the module at `path` is a services or selectors module of the apps."""
    parts = path.split("/")
    return (
        path in SERVICE_MODULES_NAMED
        or parts[0] in SERVICE_APPS
        and (
            parts[-1] == "services.py"
            or (len(parts) > 2 and parts[-2] == "services")
            or "selectors" in parts[-1]
        )
    )


def positional_parameters(source: str, path: str) -> list[str]:
    """'path:line: name(parameters)' for each public function of the services or selectors
    module at `path` that takes a parameter by position and is not in POSITIONAL_ALLOWED."""
    if not is_service_or_selector(path):
        return []
    found: list[str] = []
    for node in ast.parse(source, filename=path).body:  # module level: methods are free
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if node.name.startswith("_") or (path, node.name) in POSITIONAL_ALLOWED:
            continue
        args = node.args
        positional = [a.arg for a in (*args.posonlyargs, *args.args)]
        if args.vararg:
            positional.append(f"*{args.vararg.arg}")
        if positional:
            found.append(f"{path}:{node.lineno}: {node.name}({', '.join(positional)})")
    return found


def _reader_kind(path: str) -> str:
    """ "reads" for a module that only reads, "view" for a view or API module, "" otherwise."""
    name = path.rsplit("/", 1)[-1]
    if path.split("/")[0] not in APPS:
        return ""
    if "selectors" in name or path in READERS:
        return "reads"
    if name in ("views.py", "api.py") or name.endswith("_views.py"):
        return "view"
    return ""


def _orm_write(call: ast.Call) -> bool:
    """Whether `call` is an ORM write by its shape: `save()` and `delete()` take no positional
    argument (a workbook's `save(stream)` and a cache's `delete(key)` do); a queryset's
    `update` takes keywords only, called on an expression (a dict held in a local, as
    `context.update(x=1)`, is left alone: the run-time test sees what this cannot)."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr in ORM_WRITES:
        return True
    if func.attr in ("save", "delete"):
        return not call.args
    if func.attr == "update":
        return not call.args and bool(call.keywords) and not isinstance(func.value, ast.Name)
    return False


def find_writes(source: str, path: str) -> list[str]:
    """'path:line: what' for each write in `source` (the module at `path`) that a reader, view
    or API module may not make (the third rule above)."""
    kind = _reader_kind(path)
    if not kind:
        return []
    tree = ast.parse(source, filename=path)
    allowed: set[int] = set()  # ids of nodes inside an allowed function
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (
            (path, node.name) in WRITES_ALLOWED
        ):
            allowed.update(id(inner) for inner in ast.walk(node))
    found: list[str] = []
    for node in ast.walk(tree):
        if id(node) in allowed:
            continue
        if isinstance(node, ast.Call) and _orm_write(node):
            found.append(f"{path}:{node.lineno}: writes ({ast.unparse(node.func)})")
        if kind != "reads":
            continue
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name.endswith(WRITER_SUFFIXES):
                found.append(f"{path}:{node.lineno}: calls a service ({name})")
        if isinstance(node, ast.ImportFrom) and node.module:
            module = _resolve(path, node.level, node.module)
            if "services" in module.split(".") and (path, module) not in WRITES_ALLOWED:
                found.append(f"{path}:{node.lineno}: imports services ({module})")
        if isinstance(node, ast.Import):
            for alias in node.names:
                if "services" in alias.name.split("."):
                    found.append(f"{path}:{node.lineno}: imports services ({alias.name})")
    return found


def _modules() -> list[Path]:
    return sorted(
        file
        for package in PACKAGES
        for file in (ROOT / package).rglob("*.py")
        if "migrations" not in file.relative_to(ROOT).parts
    )


def test_no_private_names_cross_modules_and_only_settings_reads_the_environment() -> None:
    findings = [
        finding
        for file in _modules()
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
        (
            "tests/judging/test_x.py",
            "from tests.judging.test_y import _helper\n",
            ["tests/judging/test_x.py:1: imports private tests.judging.test_y._helper"],
        ),
        (
            "benchmarks/x.py",
            "from analysis import selectors\n\nselectors._build()\n",
            ["benchmarks/x.py:3: uses private analysis.selectors._build"],
        ),
        (
            "benchmarks/x.py",
            "from unittest import mock\nfrom judging import services\n\n"
            "mock.patch.object(services.launch, '_enqueue', None)\n",
            ["benchmarks/x.py:4: patches private judging.services.launch._enqueue"],
        ),
        (
            "tests/test_x.py",
            "def test(monkeypatch):\n    monkeypatch.setattr('judging.services.engine._call', 1)\n",
            ["tests/test_x.py:2: patches private judging.services.engine._call"],
        ),
        (
            "tests/test_x.py",
            "from unittest import mock\n\nmock.patch('analysis.selectors._read')\n",
            ["tests/test_x.py:3: patches private analysis.selectors._read"],
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
        # Tests and benchmarks set environments up; patching public names is how tests fake.
        ("tests/test_x.py", "import os\n\nos.environ['DATABASE_URL']\n"),
        ("benchmarks/x.py", "import os\n\nos.getenv('X')\n"),
        (
            "tests/test_x.py",
            "from analysis import selectors\n\n"
            "def test(monkeypatch):\n    monkeypatch.setattr(selectors, 'scores_frame', 1)\n",
        ),
        ("tests/test_x.py", "def test(monkeypatch):\n    monkeypatch.setattr(obj, '_x', 1)\n"),
        (
            "judging/api_keys.py",
            "import os\n\ndef environment_value(name):\n    return os.environ.get(name)\n",
        ),
    ],
)
def test_the_check_allows(path: str, source: str) -> None:
    assert find_violations(source, path) == []


def test_services_and_selectors_take_keyword_arguments_only() -> None:
    findings = [
        finding
        for file in _modules()
        for finding in positional_parameters(file.read_text(), file.relative_to(ROOT).as_posix())
    ]
    assert not findings, "\n".join(
        ["public services and selectors taking positional parameters (use `*,`):", *findings]
    )


def test_every_positional_exception_exists() -> None:
    """An allowed exception that no longer takes a positional parameter (or no longer exists)
    is dropped from POSITIONAL_ALLOWED, so the list stays the set of real exceptions."""
    stale = []
    for path, name in POSITIONAL_ALLOWED:
        file = ROOT / path
        functions = {
            node.name: node
            for node in (ast.parse(file.read_text()).body if file.is_file() else [])
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        node = functions.get(name)
        if node is None or not (node.args.posonlyargs or node.args.args or node.args.vararg):
            stale.append(f"{path}: {name}")
    assert not stale, stale


def test_selectors_and_exports_never_write_and_views_write_through_services() -> None:
    findings = [
        finding
        for file in _modules()
        for finding in find_writes(file.read_text(), file.relative_to(ROOT).as_posix())
    ]
    assert not findings, "\n".join(["writes where data is only read:", *findings])


@pytest.mark.parametrize(
    ("path", "source", "expected"),
    [
        (
            "judging/services/batch.py",
            "def run_start(run):\n    pass\n",
            ["judging/services/batch.py:1: run_start(run)"],
        ),
        (
            "analysis/selectors.py",
            "async def rows(ids, *, study):\n    pass\n",
            ["analysis/selectors.py:1: rows(ids)"],
        ),
        (
            "accounts/services.py",
            "def log(*events, user):\n    pass\n\ndef f(a, /, b):\n    pass\n",
            ["accounts/services.py:1: log(*events)", "accounts/services.py:4: f(a, b)"],
        ),
        (
            "annotation/admin_selectors.py",
            "def study_get(pk=None):\n    pass\n",
            ["annotation/admin_selectors.py:1: study_get(pk)"],
        ),
        (
            "analysis/jobs/services.py",
            "def job_digest(kind, params):\n    pass\n",
            ["analysis/jobs/services.py:1: job_digest(kind, params)"],
        ),
    ],
)
def test_the_keyword_check_finds(path: str, source: str, expected: list[str]) -> None:
    assert positional_parameters(source, path) == expected


@pytest.mark.parametrize(
    ("path", "source", "expected"),
    [
        (
            "analysis/selectors.py",
            "from analysis.models import RaterCode\n\n"
            "def f():\n    RaterCode.objects.bulk_create([])\n",
            ["analysis/selectors.py:4: writes (RaterCode.objects.bulk_create)"],
        ),
        (
            "annotation/team_selectors.py",
            "def f(m):\n    m.objects.get_or_create(x=1)\n    m.objects.create(x=1)\n",
            [
                "annotation/team_selectors.py:2: writes (m.objects.get_or_create)",
                "annotation/team_selectors.py:3: writes (m.objects.create)",
            ],
        ),
        (
            "analysis/export.py",
            "def f(q, row):\n    q.select_for_update().first()\n    row.save()\n"
            "    q.filter(a=1).update(b=2)\n    q.filter(a=1).delete()\n",
            [
                "analysis/export.py:2: writes (q.select_for_update)",
                "analysis/export.py:3: writes (row.save)",
                "analysis/export.py:4: writes (q.filter(a=1).update)",
                "analysis/export.py:5: writes (q.filter(a=1).delete)",
            ],
        ),
        (
            "analysis/pseudonyms.py",
            "from annotation.rater_codes import rater_codes_assign\n\n"
            "rater_codes_assign(study_id=1, rater_ids=[])\n",
            ["analysis/pseudonyms.py:3: calls a service (rater_codes_assign)"],
        ),
        (
            "analysis/release.py",
            "from annotation.services import responders_ensure\nimport judging.services\n",
            [
                "analysis/release.py:1: imports services (annotation.services)",
                "analysis/release.py:2: imports services (judging.services)",
            ],
        ),
        (
            "annotation/escalation_selectors.py",
            "from .services.rating import rating_save\n",
            ["annotation/escalation_selectors.py:1: imports services (annotation.services.rating)"],
        ),
        (
            "analysis/views.py",
            "def dashboard(request, m):\n    m.objects.create(x=1)\n",
            ["analysis/views.py:2: writes (m.objects.create)"],
        ),
        (
            "analysis/jobs/api.py",
            "def post(self, form):\n    form.save()\n",
            ["analysis/jobs/api.py:2: writes (form.save)"],
        ),
    ],
)
def test_the_write_check_finds(path: str, source: str, expected: list[str]) -> None:
    assert sorted(find_writes(source, path)) == sorted(expected)


@pytest.mark.parametrize(
    ("path", "source"),
    [
        ("judging/services/batch.py", "def run_start(*, run):\n    pass\n"),
        ("judging/services/batch.py", "def f():\n    pass\n"),
        # Private helpers, methods and nested functions are the module's own business.
        ("judging/services/batch.py", "def _spec(plan):\n    pass\n"),
        ("judging/services/prices.py", "class Prices:\n    def shown(self, unit):\n        pass\n"),
        ("analysis/selectors.py", "def f(*, a):\n    def key(row):\n        pass\n"),
        # Only services and selectors modules: views and tasks follow their frameworks.
        ("judging/views.py", "def run_page(request, pk):\n    pass\n"),
        ("judging/tasks.py", "def run_work(run_id):\n    pass\n"),
        ("scoring/parsing.py", "def parse(text):\n    pass\n"),
        ("tests/judging/test_services.py", "def helper(run):\n    pass\n"),
        # An allowed exception.
        *[(path, f"def {name}(x):\n    pass\n") for path, name in POSITIONAL_ALLOWED],
    ],
)
def test_the_keyword_check_allows(path: str, source: str) -> None:
    assert positional_parameters(source, path) == []


@pytest.mark.parametrize(
    ("path", "source"),
    [
        # Views and API modules write through services: the rating page saves a score.
        ("annotation/views.py", "from .services import rating_save\n\nrating_save(x=1)\n"),
        # Not ORM writes: a workbook saved to a stream, a cache key deleted, a dict updated.
        ("analysis/release.py", "def f(book, out):\n    book.save(out)\n"),
        ("analysis/selectors.py", "def f(cache):\n    cache.delete('k')\n"),
        (
            "analysis/selectors.py",
            "def f(context, ids):\n    context.update(a=1)\n    ids.update({2})\n",
        ),  # fmt: skip
        # The exceptions, each with its reason in WRITES_ALLOWED.
        ("annotation/views.py", "def credentials(request, form):\n    form.save()\n"),
        ("annotation/selectors.py", "from .services.consent import consent_refusal\n"),
        # Services, importers and the other modules write: the rule is not theirs.
        ("annotation/membership.py", "def f(m):\n    m.objects.get_or_create(x=1)\n"),
        ("analysis/downloads.py", "def f(m):\n    m.objects.create(x=1)\n"),
    ],
)
def test_the_write_check_allows(path: str, source: str) -> None:
    assert find_writes(source, path) == []


def test_the_llama_cpp_build_flags_are_written_once() -> None:
    """bin/llama-cmake-args.sh holds them; the install hint, the scripts and the docs source or
    name that file, so a change to the flags cannot leave an old copy behind."""
    flag = "-DGGML_" + "NATIVE"  # spelled in two parts so this test is not a copy itself
    tracked = [
        path
        for folder in (*PACKAGES, "bin", "docs", ".ci")
        for path in (ROOT / folder).rglob("*")
        if path.is_file() and path.suffix not in {".png", ".pyc", ".gguf", ".db"}
    ] + [
        ROOT / name for name in ("README.md", "pyproject.toml", "docker-compose.yml", "Dockerfile")
    ]
    holders = [
        str(path.relative_to(ROOT))
        for path in tracked
        if path.exists() and flag in path.read_text(encoding="utf-8", errors="replace")
    ]
    assert holders == ["bin/llama-cmake-args.sh"], holders
