"""The layers point one way (issue 19): ``trainer`` <- ``webapp`` (models, state machine,
domain services, selectors) <- ``scheduler`` (launch, submit, sync and recovery, cancel,
packing, and their shared helpers) <- ``scheduler.tasks`` (Celery). A module may import
its own layer and those below it, never one above, not even inside a function. The entry
points (views, URL confs, settings, management commands, the Celery bootstrap in
``webapp/__init__.py``) sit on top and may import any layer.

The imports are read from the source (AST), so a lazy import inside a function counts.
"""

from __future__ import annotations

import ast
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
    top, last = parts[0], parts[-1]
    if top == "trainer":
        return 0
    if top == "scheduler":
        return 3 if module == "scheduler.tasks" else 2
    if top != "webapp":
        return None
    entry = (
        module == "webapp"
        or last.startswith("views")
        or last in {"urls", "settings", "wsgi", "asgi"}
        or "management" in parts
    )
    return ENTRY_POINT if entry else 1


def upward_imports(module: str, imported: list[str]) -> list[str]:
    """The names in ``imported`` that ``module`` may not import (from a layer above).

    An entry point counts as the webapp layer when imported (``webapp/api/schema.py``
    reads the API views' limits): the rule is about the layers, not about views."""
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


def imports_of(module: str, path: Path) -> list[str]:
    """Every module ``path`` imports, at any depth (relative imports resolved)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names.append(base)
            names += [f"{base}.{alias.name}" for alias in node.names]
    return [name for name in names if layer(name) is not None]


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
        ("webapp.experiments.services", ["scheduler.launch"], ["scheduler.launch"]),
        ("scheduler.dispatch", ["scheduler.tasks"], ["scheduler.tasks"]),
        ("trainer.run", ["webapp.experiments.models"], ["webapp.experiments.models"]),
        # The scheduler's lifecycle modules are one layer: they import each other freely,
        # and the tasks import them.
        (
            "scheduler.tasks",
            ["scheduler.submit", "scheduler.sync", "scheduler.packing", "webapp.core.services"],
            [],
        ),
        ("scheduler.sync", ["scheduler.run_job", "scheduler.dispatch"], []),
        ("scheduler.launch", ["scheduler.dispatch", "webapp.experiments.services"], []),
        ("scheduler.run_job", ["webapp.experiments.services", "trainer.mwra"], []),
        ("scheduler.packing", ["webapp.experiments.series_packs"], []),
        ("scheduler.sync", ["scheduler.tasks"], ["scheduler.tasks"]),
        ("scheduler.packing", ["scheduler.tasks"], ["scheduler.tasks"]),
        (
            "webapp.experiments.views_pages",
            ["scheduler.launch", "scheduler.dispatch", "scheduler.run_job"],
            [],
        ),
        ("webapp.core.management.commands.demo_setup", ["scheduler.launch"], []),
        ("webapp.experiments.services", ["django.db", "trainer.config"], []),
        ("webapp.api.schema", ["webapp.api.views"], []),
        ("trainer.run", ["webapp.api.views"], ["webapp.api.views"]),
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
    imported = imports_of("webapp.experiments.services", source)
    assert "scheduler.dispatch" in imported
    assert upward_imports("webapp.experiments.services", imported)
