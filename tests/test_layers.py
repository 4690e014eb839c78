"""The layers point one way (issue 19): ``trainer`` <- ``webapp`` (models, state machine,
domain services, selectors) <- ``scheduler`` (launch, submit, sync and recovery, cancel,
packing, and their shared helpers) <- ``scheduler.tasks`` (Celery). A module may import
its own layer and those below it, never one above, not even inside a function. The entry
points (views, URL confs, settings, management commands, the Celery bootstrap in
``webapp/__init__.py``) sit on top and may import any layer.

Inside ``webapp`` (issue 32) the areas are apps in one order, each importing only those
before it: ``core`` < ``registry`` < ``runs`` < ``metrics`` < ``evals`` < ``compare`` <
``dashboard`` (so no two apps import each other); no module but an entry point imports a
view; the pure modules (statistics, downsampling, progress, the batch parser) import no
Django, not even through another module; ``webapp.experiments`` holds only the tables'
history (its migrations).

Inside ``trainer`` (issue 32): :mod:`trainer.declarations` is the leaf (it imports nothing
of the trainer but :mod:`trainer.registry`); the declarations, ``trainer.core`` and the
modules below the regimes (config, metrics, wire, spool) import no regime; a regime
imports neither the worker (``trainer.run``) nor the CLI. And no import cycle exists
anywhere among the first-party modules.

The imports are read from the source (AST), so a lazy import inside a function counts;
an import under ``if TYPE_CHECKING:`` is never executed and does not count for cycles.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("trainer", "webapp", "scheduler")
LAYER_NAMES = ("trainer", "webapp domain", "scheduler", "scheduler.tasks")
ENTRY_POINT = len(LAYER_NAMES)


def layer(module: str) -> int | None:
    """The layer of a first-party ``module`` (0 = trainer ... 3 = tasks), ENTRY_POINT for
    an entry point, None for a third-party module."""
    parts = module.split(".")
    top = parts[0]
    if top == "trainer":
        return 0
    if top == "scheduler":
        return 3 if module == "scheduler.tasks" else 2
    if top != "webapp":
        return None
    entry = is_entry_point(module)
    return ENTRY_POINT if entry else 1


def is_entry_point(module: str) -> bool:
    """A view, a URL conf, settings, a management command, the Celery bootstrap."""
    parts = module.split(".")
    last = parts[-1]
    return (
        module == "webapp"
        or last.startswith("views")
        or last.endswith("urls")
        or last in {"settings", "wsgi", "asgi"}
        or "management" in parts
    )


def upward_imports(module: str, imported: list[str]) -> list[str]:
    """The names in ``imported`` that ``module`` may not import (from a layer above).

    An entry point counts as the webapp layer when imported: the rule is about the
    layers (whether a domain module may import a view is :func:`area_rule_breaks`')."""
    own = layer(module)
    if own is None or own == ENTRY_POINT:
        return []
    return [name for name in imported if _layer_when_imported(name) > own]


def _layer_when_imported(module: str) -> int:
    found = layer(module) or 0
    return 1 if found == ENTRY_POINT else found


def first_party_modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if "migrations" not in parts:
                yield ".".join(parts), path


def imports_of(module: str, path: Path, tree: ast.Module | None = None) -> list[str]:
    """Every module ``path`` imports, at any depth (relative imports resolved)."""
    names = []
    tree = tree or ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _from_module(node, module, path)
            names.append(base)
            names += [f"{base}.{alias.name}" for alias in node.names]
    return [name for name in names if layer(name) is not None]


def _from_module(node: ast.ImportFrom, module: str, path: Path) -> str:
    """The absolute module a ``from ... import`` in ``module`` (at ``path``) reads from."""
    base = node.module or ""
    if not node.level:
        return base
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join([*anchor, base] if base else anchor)


TRAINER_RULES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    # (modules the rule is about (a prefix), what they may not import (prefixes), why)
    ("trainer.declarations", ("trainer.",), "the declarations are the leaf"),
    ("trainer.core", ("trainer.regimes",), "the core knows no regime"),
    *(
        (below, ("trainer.regimes",), "reads the registry in trainer.declarations")
        for below in ("trainer.config", "trainer.metrics", "trainer.wire", "trainer.spool")
    ),
    ("trainer.regimes", ("trainer.run", "trainer.cli"), "a regime is run, it runs nothing"),
)
LEAF_ALLOWED = ("trainer.registry",)


def trainer_rule_breaks(module: str, imported: list[str]) -> list[str]:
    """The names in ``imported`` that ``module`` may not import by :data:`TRAINER_RULES`."""
    broken = []
    for subject, forbidden, _why in TRAINER_RULES:
        if not _within(module, subject):
            continue
        for name in imported:
            if any(_within(name, allowed) for allowed in LEAF_ALLOWED) or _within(name, subject):
                continue
            if any(
                _within(name, prefix.rstrip(".")) or name.startswith(prefix) for prefix in forbidden
            ):
                broken.append(name)
    return sorted(set(broken))


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _runtime_tree(path: Path) -> ast.Module:
    """``path``'s syntax tree without the bodies of ``if TYPE_CHECKING:`` (never run)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            node.body = []
    return tree


def runtime_imports(module: str, path: Path) -> list[str]:
    """:func:`imports_of` without the imports under ``if TYPE_CHECKING:``."""
    return imports_of(module, path, tree=_runtime_tree(path))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """First-party module -> the first-party modules it imports at run time (any depth,
    functions included). ``from package import submodule`` is an edge to the submodule,
    not to the package (Python initialises a package before any of its submodules,
    whoever imports them); ``from package import name`` is an edge to the package."""
    modules = dict(first_party_modules())

    def resolve(name: str) -> str | None:
        parts = name.split(".")
        while parts:
            if ".".join(parts) in modules:
                return ".".join(parts)
            parts.pop()
        return None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets: set[str | None] = set()
        for node in ast.walk(_runtime_tree(path)):
            if isinstance(node, ast.Import):
                targets |= {resolve(alias.name) for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = _from_module(node, module, path)
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    targets.add(submodule if submodule in modules else resolve(base))
        graph[module] = {target for target in targets if target and target != module}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_no_import_cycle_anywhere() -> None:
    cycles = import_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_lazy_cycle_and_ignores_type_checking(tmp_path: Path) -> None:
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []
    source = tmp_path / "config.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from trainer.regimes.base import Regime\n"
        "def f():\n    from trainer.regimes import regime_spec\n"
    )
    assert runtime_imports("trainer.config", source) == [
        "trainer.regimes",
        "trainer.regimes.regime_spec",
    ]


def test_the_trainer_keeps_its_inner_rules() -> None:
    problems = []
    for module, path in first_party_modules():
        for name in trainer_rule_breaks(module, runtime_imports(module, path)):
            problems.append(f"{path.relative_to(REPO)} imports {name}")
    assert not problems, "trainer rule breaks:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("module", "imported", "broken"),
    [
        # What the old code did: config, wire and metrics reached the registry through
        # the regimes package (and so imported every regime).
        ("trainer.config", ["trainer.regimes"], ["trainer.regimes"]),
        ("trainer.metrics", ["trainer.regimes.sgt"], ["trainer.regimes.sgt"]),
        ("trainer.wire", ["trainer.declarations"], []),
        ("trainer.declarations", ["trainer.metrics"], ["trainer.metrics"]),
        ("trainer.declarations", ["trainer.registry", "re"], []),
        ("trainer.core.objectives", ["trainer.regimes.prp"], ["trainer.regimes.prp"]),
        ("trainer.core.objectives", ["trainer.declarations", "trainer.metrics"], []),
        ("trainer.regimes.sgt.regime", ["trainer.run"], ["trainer.run"]),
        ("trainer.regimes.sgt.regime", ["trainer.cli"], ["trainer.cli"]),
        ("trainer.regimes.sgt.regime", ["trainer.policy", "trainer.regimes.base"], []),
        ("trainer.run", ["trainer.regimes"], []),
    ],
)
def test_the_trainer_rules_flag_exactly_their_breaks(
    module: str, imported: list[str], broken: list[str]
) -> None:
    assert trainer_rule_breaks(module, imported) == broken


def test_no_module_imports_a_layer_above_its_own() -> None:
    problems = []
    for module, path in first_party_modules():
        for name in upward_imports(module, imports_of(module, path)):
            problems.append(
                f"{path.relative_to(REPO)} ({LAYER_NAMES[layer(module) or 0]}) imports "
                f"{name} ({LAYER_NAMES[_layer_when_imported(name)]})"
            )
    assert not problems, "upward imports:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("module", "imported", "upward"),
    [
        # What the old code did: the domain service launched through the scheduler, and
        # the scheduler's service imported its own Celery tasks.
        ("webapp.runs.services", ["scheduler.launch"], ["scheduler.launch"]),
        ("scheduler.dispatch", ["scheduler.tasks"], ["scheduler.tasks"]),
        ("trainer.run", ["webapp.runs.models"], ["webapp.runs.models"]),
        # The scheduler's lifecycle modules are one layer: they import each other freely,
        # and the tasks import them.
        (
            "scheduler.tasks",
            ["scheduler.submit", "scheduler.sync", "scheduler.packing", "webapp.core.services"],
            [],
        ),
        ("scheduler.sync", ["scheduler.run_job", "scheduler.dispatch"], []),
        ("scheduler.launch", ["scheduler.dispatch", "webapp.runs.services"], []),
        ("scheduler.run_job", ["webapp.runs.services", "trainer.mwra"], []),
        ("scheduler.packing", ["webapp.metrics.series_packs"], []),
        ("scheduler.sync", ["scheduler.tasks"], ["scheduler.tasks"]),
        ("scheduler.packing", ["scheduler.tasks"], ["scheduler.tasks"]),
        (
            "webapp.dashboard.views_pages",
            ["scheduler.launch", "scheduler.dispatch", "scheduler.run_job"],
            [],
        ),
        ("webapp.core.management.commands.demo_setup", ["scheduler.launch"], []),
        ("webapp.runs.services", ["django.db", "trainer.config"], []),
        ("webapp.metrics.views_schema", ["webapp.metrics.views"], []),
        ("trainer.run", ["webapp.metrics.views"], ["webapp.metrics.views"]),
    ],
)
def test_the_rule_flags_exactly_the_upward_imports(
    module: str, imported: list[str], upward: list[str]
) -> None:
    assert upward_imports(module, imported) == upward


def test_only_the_tasks_module_is_the_tasks_layer() -> None:
    """Every other scheduler module, the lifecycle ones included, is the scheduler layer."""
    scheduler = {module for module, _ in first_party_modules() if module.startswith("scheduler")}
    lifecycle = {
        f"scheduler.{name}"
        for name in ("launch", "submit", "sync", "cancel", "packing", "dispatch", "run_job")
    }
    assert lifecycle <= scheduler and "scheduler.service" not in scheduler
    assert {module for module in scheduler if layer(module) == 3} == {"scheduler.tasks"}
    assert all(layer(module) == 2 for module in scheduler - {"scheduler.tasks"})


def test_a_lazy_import_inside_a_function_is_read(tmp_path: Path) -> None:
    source = tmp_path / "services.py"
    source.write_text("def launch():\n    from scheduler.dispatch import enqueue_submit\n")
    imported = imports_of("webapp.runs.services", source)
    assert "scheduler.dispatch" in imported
    assert upward_imports("webapp.runs.services", imported)


# --- the web app's areas (issue 32) ------------------------------------------------------
AREAS = ("core", "registry", "runs", "metrics", "evals", "compare", "dashboard")
HISTORY_APP = "webapp.experiments"
PURE_MODULES = (
    "webapp.compare.assemble",
    "webapp.compare.bars",
    "webapp.compare.grouping",
    "webapp.compare.palette",
    "webapp.compare.significance",
    "webapp.compare.stats",
    "webapp.core.csv_safe",
    "webapp.core.digits",
    "webapp.core.flags",
    "webapp.metrics.batch",
    "webapp.metrics.downsample",
    "webapp.runs.progress",
    "webapp.runs.prompts",
)


def area_of(module: str) -> str | None:
    """``runs`` for ``webapp.runs.services``; None outside the areas."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "webapp" and parts[1] in AREAS else None


def area_rule_breaks(module: str, imported: list[str]) -> list[str]:
    """The names in ``imported`` that ``module`` may not import: the tables' history app,
    an area after its own (the order of :data:`AREAS`), and a view unless ``module`` is an
    entry point itself."""
    own = area_of(module)
    broken = []
    for name in imported:
        other = area_of(name)
        history = name == HISTORY_APP or name.startswith(HISTORY_APP + ".")
        later = own is not None and other is not None and AREAS.index(other) > AREAS.index(own)
        view = is_entry_point(name) and name.split(".")[-1].startswith("views")
        if history or later or (own is not None and view and not is_entry_point(module)):
            broken.append(name)
    return sorted(set(broken))


def test_the_areas_import_one_way_and_no_domain_module_imports_a_view() -> None:
    problems = []
    for module, path in first_party_modules():
        for name in area_rule_breaks(module, imports_of(module, path)):
            problems.append(f"{path.relative_to(REPO)} imports {name}")
    assert not problems, "area rule breaks:\n" + "\n".join(problems)


def area_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Area -> the other areas its modules import."""
    areas: dict[str, set[str]] = {area: set() for area in AREAS}
    for module, targets in graph.items():
        own = area_of(module)
        if own is not None:
            areas[own] |= {other for t in targets if (other := area_of(t)) not in (None, own)}
    return areas


def test_no_two_areas_import_each_other() -> None:
    areas = area_graph(import_graph())
    assert not import_cycles(areas), import_cycles(areas)


@pytest.mark.parametrize(
    ("module", "imported", "broken"),
    [
        # What the old code did: runs' list columns read the metric tables, the metrics'
        # ingestion moved runs through their state machine (each way one import).
        ("webapp.runs.selectors", ["webapp.metrics.models"], ["webapp.metrics.models"]),
        ("webapp.metrics.ingest", ["webapp.runs.services", "webapp.runs.models"], []),
        ("webapp.registry.services", ["webapp.runs.models"], ["webapp.runs.models"]),
        ("webapp.core.permissions", ["webapp.runs.models"], ["webapp.runs.models"]),
        # A domain module reaching a view (the old compare assembly reached the scheduler
        # through the compare page's view); a view may import a view.
        ("webapp.compare.assemble", ["webapp.compare.views_pages"], ["webapp.compare.views_pages"]),
        ("webapp.compare.selectors", ["webapp.metrics.views"], ["webapp.metrics.views"]),
        ("webapp.metrics.api_urls", ["webapp.metrics.views", "webapp.metrics.views_schema"], []),
        ("webapp.metrics.views_schema", ["webapp.metrics.views"], []),
        ("webapp.dashboard.views_pages", ["webapp.evals.evaluations", "webapp.core.http"], []),
        ("webapp.scheduler_like", ["webapp.experiments.models"], ["webapp.experiments.models"]),
        ("scheduler.launch", ["webapp.runs.services", "webapp.compare.selectors"], []),
    ],
)
def test_the_area_rules_flag_exactly_their_breaks(
    module: str, imported: list[str], broken: list[str]
) -> None:
    assert area_rule_breaks(module, imported) == broken


def test_two_areas_importing_each_other_are_found() -> None:
    graph = {
        "webapp.runs.selectors": {"webapp.metrics.models"},
        "webapp.metrics.ingest": {"webapp.runs.services"},
        "webapp.compare.views": {"webapp.runs.models"},
    }
    assert import_cycles(area_graph(graph)) == [["metrics", "runs"]]


def django_importers(graph: dict[str, set[str]]) -> set[str]:
    """The first-party modules that import Django themselves."""
    modules = dict(first_party_modules())
    found = set()
    for module in graph:
        names = [
            alias.name if isinstance(node, ast.Import) else node.module or ""
            for node in ast.walk(_runtime_tree(modules[module]))
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in (node.names if isinstance(node, ast.Import) else [node.names[0]])
        ]
        if any(name == "django" or name.startswith("django.") for name in names):
            found.add(module)
    return found


def django_paths(module: str, graph: dict[str, set[str]], importers: set[str]) -> list[str]:
    """The chains by which ``module`` reaches Django at run time (empty for a pure one)."""
    chains, seen = [], {module}
    stack = [[module]]
    while stack:
        chain = stack.pop()
        if chain[-1] in importers:
            chains.append(" -> ".join(chain))
            continue
        for target in sorted(graph.get(chain[-1], ())):
            if target not in seen:
                seen.add(target)
                stack.append([*chain, target])
    return chains


def test_the_pure_modules_import_no_django() -> None:
    graph = import_graph()
    importers = django_importers(graph)
    problems = [
        chain for module in PURE_MODULES for chain in django_paths(module, graph, importers)
    ]
    assert not problems, "pure modules reaching Django:\n" + "\n".join(problems)


def test_a_pure_module_reaching_django_through_a_model_is_found() -> None:
    graph = {"webapp.compare.assemble": {"webapp.runs.models"}, "webapp.runs.models": set()}
    assert django_paths("webapp.compare.assemble", graph, {"webapp.runs.models"}) == [
        "webapp.compare.assemble -> webapp.runs.models"
    ]


def test_the_history_app_holds_only_migrations() -> None:
    package = REPO / "webapp" / "experiments"
    modules = {
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if "migrations" not in path.parts
    }
    assert modules == {"__init__.py", "apps.py"}
