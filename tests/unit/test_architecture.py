"""The layers, read from the source's syntax trees: SQL only in models/, dialects in one module,
statemachine/ pure, no import cycle among our modules (imports inside functions and under
``if TYPE_CHECKING:`` count), and worker/ laid out as subpackages a reader can walk.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("models", "statemachine", "worker")
SQL_BUILDERS = frozenset({"select", "update", "insert", "delete"})
# What worker/ may take from SQLAlchemy: its errors, the session type it is handed, URL parsing.
SQLALCHEMY_ALLOWED = {
    "sqlalchemy.exc": None,  # any name
    "sqlalchemy.orm": frozenset({"Session"}),
    "sqlalchemy.engine": frozenset({"make_url", "URL", "Engine"}),
}
# The dialect strategy: defined in one module, chosen in one other (where engines are made).
DIALECT_MODULE = "models.dialects"
DIALECT_CHOOSERS = frozenset({"models.db"})
DIALECT_NAMES = frozenset({"postgresql", "postgres", "sqlite"})
# Where the tables are defined: a name taken from there is a table (or a mapped class).
TABLE_MODULES = frozenset({"models.tables"})
# worker/'s root: the public face, the Celery app and a few modules of the application API;
# everything else in a subpackage named for its part of the architecture.
ROOT_MODULES_AT_MOST = 12
# Below both the command line and the web: what the two share, importing neither.
SURFACES = ("worker.cli", "worker.web")
SHARED_BELOW_SURFACES = "worker.present"
# SQL functions both databases have under one name; any other (jsonb_build_object,
# make_interval, julianday...) is one database's, and is written in the dialect module only.
PORTABLE_FUNCTIONS = frozenset({"count", "min", "max", "sum", "coalesce", "distinct"})


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    tree: ast.Module

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"

    def where(self, node: ast.AST) -> str:
        return f"{self.path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"


def _modules() -> dict[str, Module]:
    found: dict[str, Module] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if "migrations" in parts:  # Alembic's scripts: loaded by Alembic, not imported
                continue
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = Module(name, path, ast.parse(path.read_text(), str(path)))
    return found


MODULES = _modules()


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node, at any depth (functions included), except ``if TYPE_CHECKING:`` bodies."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from (n for child in node.orelse for n in (child, *_runtime_nodes(child)))
            continue
        yield node
        yield from _runtime_nodes(node)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: Module, *, typing: bool = False) -> Iterator[tuple[ast.AST, str, list[str]]]:
    """(node, imported module, names) for each runtime import, relative ones resolved; with
    ``typing``, the imports under ``if TYPE_CHECKING:`` as well."""
    nodes = ast.walk(module.tree) if typing else _runtime_nodes(module.tree)
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.name if module.is_package else module.name.rpartition(".")[0]
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            yield node, base, [alias.name for alias in node.names]


def _ours(name: str) -> bool:
    return name.split(".")[0] in PACKAGES


def _targets(module: Module, modules: dict[str, Module], *, typing: bool = False) -> set[str]:
    """Our modules that ``module`` imports (``from pkg import sub`` counts as ``pkg.sub``)."""
    targets: set[str] = set()
    for _, imported, names in _imports(module, typing=typing):
        if not _ours(imported):
            continue
        submodules = [f"{imported}.{n}" for n in names if f"{imported}.{n}" in modules]
        if submodules:
            targets.update(submodules)
        if not names or len(submodules) < len(names):
            targets.add(imported)
    targets.discard(module.name)
    return {t for t in targets if t in modules}


def import_cycles(modules: dict[str, Module], *, typing: bool = True) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan). An import under
    ``if TYPE_CHECKING:`` counts unless ``typing`` is False: it ties the two modules as much
    for a reader (and for mypy) as one that runs."""
    graph = {name: sorted(_targets(m, modules, typing=typing)) for name, m in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        on_stack.add(name)
        for target in graph[name]:
            if target not in index:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in on_stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == name:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return cycles


def _in(package: str, modules: dict[str, Module] | None = None) -> list[Module]:
    modules = MODULES if modules is None else modules
    return [m for n, m in modules.items() if n == package or n.startswith(package + ".")]


def _sqlalchemy_aliases(module: Module) -> set[str]:
    return {
        alias.asname or alias.name
        for node in _runtime_nodes(module.tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name.split(".")[0] == "sqlalchemy"
    }


def _table_names(module: Module) -> set[str]:
    """Names that stand for tables in ``module``: taken from the tables' module, or that module
    itself (``from models import tables``)."""
    names = set()
    for _, imported, imported_names in _imports(module, typing=True):
        if imported in TABLE_MODULES:
            names.update(imported_names)
        package, _, last = next(iter(TABLE_MODULES)).rpartition(".")
        if imported == package and last in imported_names:
            names.add(last)
    for node in ast.walk(module.tree):
        if isinstance(node, ast.alias) and node.asname and node.name in names:
            names.add(node.asname)
    return names


def _is_table(receiver: ast.expr, tables: set[str]) -> bool:
    """A table object: a name for a table, ``X.__table__``, ``metadata.tables[...]``, or an
    attribute or item of one (``tables.runs``)."""
    for node in ast.walk(receiver):
        if isinstance(node, ast.Attribute) and node.attr in ("__table__", "metadata", "tables"):
            return True
        if isinstance(node, ast.Name) and node.id in tables:
            return True
    return False


def sql_built(modules: list[Module]) -> list[str]:
    """Calls that build SQL: ``select(...)``, ``sqlalchemy.update(...)``, and the method form
    on a table (``Run.__table__.update()``, ``runs_table.insert()``)."""
    found = []
    for module in modules:
        sqlalchemy_aliases = _sqlalchemy_aliases(module)
        tables = _table_names(module)
        for node in _runtime_nodes(module.tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Name) and func.id in SQL_BUILDERS:
                found.append(f"{module.where(node)} calls {func.id}(")
            elif isinstance(func, ast.Attribute) and func.attr in SQL_BUILDERS:
                if isinstance(func.value, ast.Name) and func.value.id in sqlalchemy_aliases:
                    found.append(f"{module.where(node)} calls {func.value.id}.{func.attr}(")
                elif _is_table(func.value, tables):
                    found.append(
                        f"{module.where(node)} calls {ast.unparse(func.value)}.{func.attr}("
                    )
    return found


def crowded_root(folder: Path, most: int = ROOT_MODULES_AT_MOST) -> list[str]:
    """The modules at the root of ``folder`` if there are more than ``most``."""
    found = sorted(path.name for path in folder.glob("*.py"))
    return found if len(found) > most else []


def duplicate_names(modules: dict[str, Module], package: str = "worker") -> dict[str, list[str]]:
    """Module (and subpackage) names used twice inside ``package``: a ``runs`` module of the API
    and one of the command line would be two things a reader confuses."""
    by_name: dict[str, list[str]] = {}
    for module in _in(package, modules):
        if module.name == package:
            continue
        by_name.setdefault(module.name.rpartition(".")[2], []).append(module.name)
    return {name: sorted(found) for name, found in by_name.items() if len(found) > 1}


def surfaces_tied(modules: dict[str, Module]) -> list[str]:
    """Imports that tie the command line and the web together, or the layer below both to
    either. (``interlude serve`` starting the web app is the one way allowed: cli -> web.)"""
    forbidden = {
        "worker.web": ("worker.cli",),
        SHARED_BELOW_SURFACES: SURFACES,
    }
    found = []
    for source, targets in forbidden.items():
        for module in _in(source, modules):
            for target in _targets(module, modules, typing=True):
                if any(target == t or target.startswith(t + ".") for t in targets):
                    found.append(f"{module.name} imports {target}")
    return sorted(found)


def test_the_graph_is_read_from_every_module() -> None:
    # A check over nothing cannot fail: make sure the walk found the layers and their imports.
    assert {"models.db", "statemachine", "worker.engine.runtime", "worker.cli"} <= set(MODULES)
    assert "models.db" in _targets(MODULES["worker.engine.runtime"], MODULES)
    assert "worker.engine.dispatch" in _targets(MODULES["worker.testing"], MODULES)


def test_worker_builds_no_sql() -> None:
    found = sql_built(_in("worker"))
    assert found == [], "SQL is built in models/ only:\n" + "\n".join(found)


def test_worker_imports_no_sqlalchemy_query_constructs() -> None:
    found = []
    for module in _in("worker"):
        for node, imported, names in _imports(module):
            if imported.split(".")[0] != "sqlalchemy":
                continue
            if imported not in SQLALCHEMY_ALLOWED:
                found.append(f"{module.where(node)} imports {imported} {names}")
                continue
            allowed = SQLALCHEMY_ALLOWED[imported]
            if not names or (allowed is not None and not set(names) <= allowed):
                found.append(f"{module.where(node)} imports {imported} {names}")
    assert found == [], "query constructs belong to models/:\n" + "\n".join(found)


def test_the_dialect_is_decided_in_one_place() -> None:
    found = []
    for module in MODULES.values():
        if module.name == DIALECT_MODULE:
            continue
        for node in _runtime_nodes(module.tree):
            name = (
                node.id
                if isinstance(node, ast.Name)
                else node.attr
                if isinstance(node, ast.Attribute)
                else node.name
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                else None
            )
            if name == "is_postgresql":
                found.append(f"{module.where(node)} uses is_postgresql")
            if name == "dialect_for" and module.name not in DIALECT_CHOOSERS:
                found.append(f"{module.where(node)} chooses a dialect")
            # A branch on the backend's name: `... == "postgresql"`, `... in ("sqlite", ...)`.
            if isinstance(node, ast.Compare):
                literals = {
                    c.value
                    for side in (node.left, *node.comparators)
                    for c in ast.walk(side)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                }
                if literals & DIALECT_NAMES:
                    found.append(f"{module.where(node)} branches on the database's name")
    assert found == [], f"dialect differences live in {DIALECT_MODULE}:\n" + "\n".join(found)


def dialect_specific_sql(module: Module) -> list[str]:
    """Where ``module`` imports from ``sqlalchemy.dialects`` (one database's constructs and
    types) or calls an SQL function (``func.name``) that not both databases have."""
    found = [
        f"{module.where(node)} imports {imported}"
        for node, imported, _ in _imports(module)
        if imported == "sqlalchemy.dialects" or imported.startswith("sqlalchemy.dialects.")
    ]
    for node in _runtime_nodes(module.tree):
        if not isinstance(node, ast.Attribute) or node.attr in PORTABLE_FUNCTIONS:
            continue
        base = node.value
        if (isinstance(base, ast.Name) and base.id == "func") or (
            isinstance(base, ast.Attribute) and base.attr == "func"
        ):
            found.append(f"{module.where(node)} calls SQL function {node.attr}")
    return found


def test_dialect_specific_sql_is_written_in_the_dialect_module_only() -> None:
    found = [
        finding
        for module in MODULES.values()
        if module.name != DIALECT_MODULE
        for finding in dialect_specific_sql(module)
    ]
    assert found == [], f"one database's SQL belongs to {DIALECT_MODULE}:\n" + "\n".join(found)
    # (The rule sees what it forbids where it is allowed.)
    assert len(dialect_specific_sql(MODULES[DIALECT_MODULE])) >= 3


def test_the_dialect_rule_sees_what_it_forbids() -> None:
    planted = ast.parse(
        "import sqlalchemy as sa\n"
        "from sqlalchemy import func\n"
        "from sqlalchemy.dialects.postgresql import JSONB\n"
        "def f(column):\n"
        "    return func.make_interval(0, column), sa.func.julianday(column), func.count()\n"
    )
    module = Module("models.planted", ROOT / "models" / "planted.py", planted)
    found = dialect_specific_sql(module)
    assert [f.split(" ", 1)[1] for f in found] == [
        "imports sqlalchemy.dialects.postgresql",
        "calls SQL function make_interval",
        "calls SQL function julianday",
    ]


def test_statemachine_imports_nothing_of_ours() -> None:
    found = [
        f"{module.where(node)} imports {imported}"
        for module in _in("statemachine")
        for node, imported, _ in _imports(module)
        if _ours(imported) and imported.split(".")[0] != "statemachine"
    ]
    assert found == [], "statemachine/ is pure:\n" + "\n".join(found)


def test_no_import_cycle_among_our_modules() -> None:
    cycles = import_cycles(MODULES)
    assert cycles == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_worker_root_holds_few_modules() -> None:
    crowded = crowded_root(ROOT / "worker")
    assert crowded == [], (
        f"worker/ holds more than {ROOT_MODULES_AT_MOST} modules at its root; put the new one "
        f"in the subpackage of its part (engine, gateway, flows, ops, present, cli, web): "
        f"{crowded}"
    )


def test_no_two_modules_in_worker_share_a_name() -> None:
    duplicates = duplicate_names(MODULES)
    assert duplicates == {}, f"module names used twice inside worker/: {duplicates}"


def test_the_web_and_the_cli_share_only_what_is_below_both() -> None:
    found = surfaces_tied(MODULES)
    assert found == [], "web/ imports no cli/; present/ imports neither:\n" + "\n".join(found)


def test_the_checks_see_what_they_forbid() -> None:
    # Each rule, given a module that breaks it, finds the break (the rules can fail).
    bad = {
        "worker.a": "from sqlalchemy import select\ndef f():\n    from worker.b import g\n"
        "    return select(1)\n",
        "worker.b": "import worker.a\ndef g(engine):\n    return engine.name == 'postgresql'\n",
    }
    modules = {
        name: Module(name, ROOT / "worker" / f"{name[-1]}.py", ast.parse(source))
        for name, source in bad.items()
    }
    assert import_cycles(modules) == [["worker.a", "worker.b"]]
    calls = [
        n
        for n in _runtime_nodes(modules["worker.a"].tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in SQL_BUILDERS
    ]
    assert len(calls) == 1
    compares = [n for n in _runtime_nodes(modules["worker.b"].tree) if isinstance(n, ast.Compare)]
    assert len(compares) == 1


def _planted(sources: dict[str, str]) -> dict[str, Module]:
    return {
        name: Module(name, ROOT / Path(*name.split(".")).with_suffix(".py"), ast.parse(source))
        for name, source in sources.items()
    }


def test_a_cycle_through_type_checking_imports_is_found() -> None:
    # Given two modules that import each other, one of them only for its annotations
    modules = _planted(
        {
            "worker.a": "from worker.b import B\nclass A: ...\n",
            "worker.b": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from worker.a import A\nclass B: ...\n",
        }
    )
    # Then the cycle is found, though it never runs
    assert import_cycles(modules) == [["worker.a", "worker.b"]]
    assert import_cycles(modules, typing=False) == []


def test_method_form_sql_on_a_table_is_found() -> None:
    # Given statements built from a table's methods, and look-alike calls on other objects
    modules = _planted(
        {
            "worker.a": "from models.tables import Run\n"
            "def f(d):\n"
            "    d.update(x=1)\n"  # a dict: no SQL
            "    [].insert(0, 1)\n"  # a list: no SQL
            "    return Run.__table__.update().values(state='x')\n",
            "worker.b": "from models import tables\ndef g():\n    return tables.runs.delete()\n",
            "worker.c": "from models.tables import Run as R\n"
            "def h(md):\n    return R.select(), md.tables['runs'].insert()\n",
        }
    )
    # Then each method-form statement is found, and nothing else
    found = sql_built(list(modules.values()))
    assert [line.split(" ", 1)[1] for line in found] == [
        "calls Run.__table__.update(",
        "calls tables.runs.delete(",
        "calls R.select(",
        "calls md.tables['runs'].insert(",
    ]


def test_a_crowded_root_is_found(tmp_path: Path) -> None:
    # Given a package with one module more than its root may hold
    for number in range(ROOT_MODULES_AT_MOST + 1):
        (tmp_path / f"m{number}.py").write_text("")
    (tmp_path / "notes.txt").write_text("")
    # Then it is found; with one module fewer it is not
    assert len(crowded_root(tmp_path)) == ROOT_MODULES_AT_MOST + 1
    (tmp_path / "m0.py").unlink()
    assert crowded_root(tmp_path) == []


def test_a_module_name_used_twice_is_found() -> None:
    # Given a module and a subpackage's module of the same name, and a package named like one
    modules = _planted(
        {
            "worker": "",
            "worker.orders": "",
            "worker.shop": "",
            "worker.shop.orders": "",
            "worker.carts": "",
            "worker.shop.carts": "",
            "worker.engine.state": "",
        }
    )
    # Then each name used twice is found, and no other
    assert duplicate_names(modules) == {
        "orders": ["worker.orders", "worker.shop.orders"],
        "carts": ["worker.carts", "worker.shop.carts"],
    }


def test_surfaces_tied_together_are_found() -> None:
    # Given the web importing the command line, and the shared layer importing the web
    modules = _planted(
        {
            "worker.cli.serve": "from worker.web.asgi import create_app\n",
            "worker.cli.output": "",
            "worker.web.asgi": "from worker.cli.output import age\n",
            "worker.present.formats": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from worker.web import asgi\n",
            "worker.web": "",
        }
    )
    # Then both are found; the command line starting the web app is not
    assert surfaces_tied(modules) == [
        "worker.present.formats imports worker.web.asgi",
        "worker.web.asgi imports worker.cli.output",
    ]
