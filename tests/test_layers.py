"""The layers, checked over every source file: each module belongs to one part, each part may
import only the parts listed for it, and no modules import each other in a circle. Every
import counts: at the top, inside a function, under ``if TYPE_CHECKING:`` (a circle that only
the type checker sees still ties the modules together, and hides a real call).

Where the code does not keep to this yet, the exceptions are named below (``ALLOWANCES``), each
with why it is there, so the debt is visible and nothing new slips in beside it. The test of
the test feeds the same check synthetic modules, one wrong import of each kind.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE_FOLDERS = ("statecharts", "persistence", "machines", "benchmarks", "scripts")

# module prefix -> part, the longest prefix first (a module is in the part of the first match)
PARTS: tuple[tuple[str, str], ...] = (
    ("statecharts.cli", "cli"),  # the `statecharts` command: gathers every tool's subcommands
    ("persistence.cli", "cli"),
    ("persistence.impact_cli", "cli"),  # `diff --store`: the runtime's option on the diff
    ("persistence.lifecycle_cli", "cli"),  # `runs wait`, `--wait`, `--where`
    ("persistence.ui.cli", "cli"),  # `statecharts ui`
    ("statecharts.render", "render"),
    ("statecharts.diff", "diff"),
    ("statecharts.testing", "test kit"),
    ("statecharts.io", "formats"),
    ("statecharts", "engine"),
    ("persistence.stores", "stores"),
    ("persistence.schema", "stores"),
    ("persistence.wakeup", "stores"),  # the stores' notifications to waiting workers
    ("persistence.web", "web"),  # what the web UI and the ingress share
    ("persistence.ui", "web UI"),
    ("persistence.ingress", "ingress"),
    ("persistence.telemetry", "telemetry"),
    ("persistence.testing", "durable test kit"),
    ("persistence", "runtime"),
    ("machines", "machines"),
    ("benchmarks", "benchmarks"),
    ("scripts", "scripts"),
)

_TOOLS = {"engine", "formats", "render", "diff", "test kit"}
_DURABLE = {"stores", "telemetry", "runtime", "web", "ingress", "web UI"}

# part -> the other parts it may import
MAY_IMPORT: Mapping[str, frozenset[str]] = {
    "engine": frozenset(),
    "formats": frozenset({"engine"}),
    "render": frozenset({"engine"}),
    "diff": frozenset({"engine", "render"}),
    "test kit": frozenset({"engine"}),
    "stores": frozenset({"engine"}),
    "telemetry": frozenset({"engine", "stores"}),
    "runtime": frozenset({"engine", "stores", "telemetry", "diff"}),
    "web": frozenset({"engine", "stores", "runtime"}),
    "ingress": frozenset({"engine", "stores", "telemetry", "runtime", "web"}),
    "web UI": frozenset({"engine", "render", "stores", "telemetry", "runtime", "web"}),
    "durable test kit": frozenset({"engine", "test kit", "stores", "runtime"}),
    "cli": frozenset(_TOOLS | _DURABLE),
    "machines": frozenset(_TOOLS | _DURABLE | {"durable test kit"}),
    "benchmarks": frozenset(_TOOLS | _DURABLE | {"machines"}),
    "scripts": frozenset(_TOOLS | _DURABLE | {"machines", "cli"}),
}

# (importer, imported) -> why it is allowed for now; each breaks a circle or crosses a layer
ALLOWANCES: Mapping[tuple[str, str], str] = {}


# -- the check ------------------------------------------------------------------------------


def imported_names(source: str, module: str, is_package: bool) -> list[str]:
    """Every module name ``source`` imports, wherever the import stands, relative imports
    resolved against ``module`` (``from p import x`` gives ``p.x``: ``x`` may be a module)."""
    package = module if is_package else module.rpartition(".")[0]
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            names += [f"{base}.{alias.name}" for alias in node.names]
    return names


def import_graph(sources: Mapping[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """module -> the modules of ``sources`` it imports (``sources``: module -> (its source,
    whether it is a package's ``__init__``))."""
    graph: dict[str, set[str]] = {}
    for module, (source, is_package) in sources.items():
        found = graph.setdefault(module, set())
        for name in imported_names(source, module, is_package):
            while name and name not in sources:  # `p.x` where x is a name in module p
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return graph


def part_of(module: str) -> str:
    """The part ``module`` belongs to."""
    for prefix, part in PARTS:
        if module == prefix or module.startswith(prefix + "."):
            return part
    raise AssertionError(f"{module} belongs to no part: add it to PARTS")


def wrong_imports(
    graph: Mapping[str, Iterable[str]], allowances: Mapping[tuple[str, str], str] = ALLOWANCES
) -> list[str]:
    """Each import of a part its part may not import, as ``a (part) imports b (part)``."""
    found = []
    for module, imports in sorted(graph.items()):
        mine = part_of(module)
        for other in sorted(imports):
            theirs = part_of(other)
            if (
                theirs != mine
                and theirs not in MAY_IMPORT[mine]
                and (module, other) not in allowances
            ):
                found.append(f"{module} ({mine}) imports {other} ({theirs})")
    return found


def circles(
    graph: Mapping[str, Iterable[str]], allowances: Mapping[tuple[str, str], str] = ALLOWANCES
) -> list[list[str]]:
    """The groups of modules that import each other in a circle (Tarjan's strongly connected
    components, iteratively), the allowed imports left out."""
    edges = {
        m: sorted(o for o in imports if (m, o) not in allowances and o in graph)
        for m, imports in graph.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def _module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def project_sources() -> dict[str, tuple[str, bool]]:
    """Every source file of the project (tests aside), by module name."""
    sources = {}
    for folder in SOURCE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            module, is_package = _module_name(path)
            sources[module] = (path.read_text(encoding="utf-8"), is_package)
    return sources


# -- the project ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(project_sources())


def test_every_part_imports_only_the_parts_below_it(graph: dict[str, set[str]]) -> None:
    assert wrong_imports(graph) == []


def test_no_modules_import_each_other_in_a_circle(graph: dict[str, set[str]]) -> None:
    assert circles(graph) == []


def test_every_allowance_is_still_needed(graph: dict[str, set[str]]) -> None:
    """An allowance whose import is gone is deleted, so the list says what is left to do."""
    stale = [pair for pair in ALLOWANCES if pair[1] not in graph.get(pair[0], set())]
    assert stale == []


def test_the_engine_core_imports_no_tool_and_no_runtime(graph: dict[str, set[str]]) -> None:
    """The rule the brief states in words, read off the graph: ``statecharts/*.py`` (the
    command aside) imports only ``statecharts/*.py``."""
    core = [m for m in graph if part_of(m) == "engine"]
    assert "statecharts.algorithm" in core and "statecharts.routes" in core
    assert {o for m in core for o in graph[m] if part_of(o) != "engine"} == set()


# -- the test of the test: one wrong import of each kind ------------------------------------


def _synthetic(**modules: str) -> dict[str, set[str]]:
    """A graph from synthetic sources (``a__b`` names module ``a.b``), over a few real modules
    every synthetic one may import."""
    sources = {name.replace("__", "."): (source, False) for name, source in modules.items()}
    for real in (
        "statecharts",
        "statecharts.cli",
        "statecharts.frozen",
        "statecharts.render",
        "statecharts.diff",
        "persistence",
        "persistence.runtime",
        "persistence.stores",
        "persistence.ui",
        "machines",
    ):
        sources.setdefault(real, ("", True))
    return import_graph(sources)


@pytest.mark.parametrize(
    ("modules", "expected"),
    [
        (
            {"statecharts__algorithm": "from persistence.runtime import Runtime"},
            "statecharts.algorithm (engine) imports persistence.runtime (runtime)",
        ),
        (
            {"statecharts__algorithm": "from .render import to_svg"},
            "statecharts.algorithm (engine) imports statecharts.render (render)",
        ),
        (
            {"statecharts__render__model": "def f():\n    from ..diff import changes\n"},
            "statecharts.render.model (render) imports statecharts.diff (diff)",
        ),
        (
            {"statecharts__diff__cli": "import persistence.stores"},
            "statecharts.diff.cli (diff) imports persistence.stores (stores)",
        ),
        (
            {"statecharts__render__cli": "from statecharts.cli import main"},
            "statecharts.render.cli (render) imports statecharts.cli (cli)",
        ),
        (
            {
                "statecharts__testing__kit": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    from persistence.runtime import Runtime\n"
            },
            "statecharts.testing.kit (test kit) imports persistence.runtime (runtime)",
        ),
        (
            {"persistence__ingress": "from persistence.ui import app"},
            "persistence.ingress (ingress) imports persistence.ui (web UI)",
        ),
        (
            {"persistence__web__runs": "from persistence.ui import views"},
            "persistence.web.runs (web) imports persistence.ui (web UI)",
        ),
        (
            {"persistence__stores__records": "from persistence import runtime"},
            "persistence.stores.records (stores) imports persistence.runtime (runtime)",
        ),
        (
            {"persistence__runtime": "import machines"},
            "persistence.runtime (runtime) imports machines (machines)",
        ),
    ],
    ids=[
        "engine->runtime",
        "engine->tool",
        "render->diff (in a function)",
        "diff->stores",
        "tool->cli",
        "test kit->runtime (TYPE_CHECKING)",
        "ingress->web UI",
        "web->web UI",
        "stores->runtime",
        "runtime->machines",
    ],
)
def test_a_wrong_import_of_each_kind_is_found(modules: dict[str, str], expected: str) -> None:
    assert expected in wrong_imports(_synthetic(**modules), {})


def test_a_circle_is_found_even_when_only_the_type_checker_sees_it() -> None:
    graph = _synthetic(
        statecharts__one="from statecharts import two\n",
        statecharts__two="from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from .three import Three\n",
        statecharts__three="def later():\n    from statecharts.one import x\n",
    )
    assert wrong_imports(graph, {}) == []  # all in one part: only the circle is wrong
    assert circles(graph, {}) == [["statecharts.one", "statecharts.three", "statecharts.two"]]
    assert circles(graph, {("statecharts.three", "statecharts.one"): "allowed"}) == []


def test_an_allowance_covers_only_its_own_import() -> None:
    graph = _synthetic(
        persistence__ingress="from persistence.ui import api, app\n",
        persistence__ui__api="",
        persistence__ui__app="",
    )
    allowed = {("persistence.ingress", "persistence.ui.api"): "one"}
    assert wrong_imports(graph, allowed) == [
        "persistence.ingress (ingress) imports persistence.ui.app (web UI)"
    ]


def test_relative_imports_resolve_against_their_package() -> None:
    assert imported_names(
        "from . import a\nfrom ..b import c\nfrom .d import e", "p.q.mod", False
    ) == ["p.q.a", "p.b.c", "p.q.d.e"]
    assert imported_names("from .x import y", "p.q", True) == ["p.q.x.y"]
