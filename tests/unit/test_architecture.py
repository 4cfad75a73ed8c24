"""The layers, read from the source's syntax trees: SQL only in models/, dialects in one module,
statemachine/ pure, and no import cycle among our modules (imports inside functions count).
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


def _imports(module: Module) -> Iterator[tuple[ast.AST, str, list[str]]]:
    """(node, imported module, names) for each runtime import, relative ones resolved."""
    for node in _runtime_nodes(module.tree):
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


def _targets(module: Module, modules: dict[str, Module]) -> set[str]:
    """Our modules that ``module`` imports (``from pkg import sub`` counts as ``pkg.sub``)."""
    targets: set[str] = set()
    for _, imported, names in _imports(module):
        if not _ours(imported):
            continue
        submodules = [f"{imported}.{n}" for n in names if f"{imported}.{n}" in modules]
        if submodules:
            targets.update(submodules)
        if not names or len(submodules) < len(names):
            targets.add(imported)
    targets.discard(module.name)
    return {t for t in targets if t in modules}


def import_cycles(modules: dict[str, Module]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    graph = {name: sorted(_targets(m, modules)) for name, m in modules.items()}
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


def _in(package: str) -> list[Module]:
    return [m for n, m in MODULES.items() if n == package or n.startswith(package + ".")]


def test_the_graph_is_read_from_every_module() -> None:
    # A check over nothing cannot fail: make sure the walk found the layers and their imports.
    assert {"models.db", "statemachine", "worker.engine.runtime", "worker.cli"} <= set(MODULES)
    assert "models.db" in _targets(MODULES["worker.engine.runtime"], MODULES)
    assert "worker.engine.dispatch" in _targets(MODULES["worker.testing"], MODULES)


def test_worker_builds_no_sql() -> None:
    found = []
    for module in _in("worker"):
        sqlalchemy_aliases = {
            alias.asname or alias.name
            for node in _runtime_nodes(module.tree)
            if isinstance(node, ast.Import)
            for alias in node.names
            if alias.name.split(".")[0] == "sqlalchemy"
        }
        for node in _runtime_nodes(module.tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Name) and func.id in SQL_BUILDERS:
                found.append(f"{module.where(node)} calls {func.id}(")
            elif (
                isinstance(func, ast.Attribute)
                and func.attr in SQL_BUILDERS
                and isinstance(func.value, ast.Name)
                and func.value.id in sqlalchemy_aliases
            ):
                found.append(f"{module.where(node)} calls {func.value.id}.{func.attr}(")
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
