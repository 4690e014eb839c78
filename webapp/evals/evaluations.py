"""A run's evaluations as its page shows them: the checkpoints it can evaluate, its
evaluation jobs, and the per-task results table (base model vs checkpoint, delta).

Results are the run's ordinary metric series, ``eval/<suite>/<task>/accuracy`` and
``.../n`` per policy (SPEC 9), so they are read like any other points: step 0 is the
base model (``python -m trainer eval-run --base``), the largest step the latest
evaluated checkpoint. Torch-free: checkpoints are listed from their directory names.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from webapp.evals.models import Evaluation
from webapp.metrics.models import MetricPoint
from webapp.runs.models import Run

CHECKPOINT_DIR = re.compile(r"^step_(\d{1,9})$", re.ASCII)
STATE_FILE = "state.json"
EVAL_KEY = re.compile(r"^eval/(?P<suite>[^/]+)/(?P<task>[^/]+)/(?P<metric>accuracy|n)$")
BASE_STEP = 0


def checkpoint_steps(run: Run) -> list[int]:
    """The steps of the run's complete checkpoints (``state.json`` written), ascending;
    [] before the run has a directory or a checkpoint."""
    if not run.run_dir:
        return []
    folder = Path(run.run_dir) / "checkpoints"
    try:
        entries = list(folder.iterdir())
    except OSError:
        return []
    steps = []
    for entry in entries:
        match = CHECKPOINT_DIR.match(entry.name)
        if match and (entry / STATE_FILE).is_file():
            steps.append(int(match.group(1)))
    return sorted(steps)


def steps_problem(steps: str, available: list[int], include_base: bool) -> str | None:
    """Why ``steps`` (``final`` | ``all`` | ``none`` | ``N,M``) cannot be evaluated now,
    or None."""
    if steps == "none":
        return None if include_base else "choose a checkpoint or the base models"
    if not available:
        if include_base:
            return "the run has no checkpoint yet: evaluate the base models only, or wait"
        return "the run has no checkpoint yet (it writes one every checkpoint_every steps)"
    if steps in ("final", "all"):
        return None
    missing = [int(s) for s in steps.split(",") if int(s) not in available]
    if missing:
        listed = ", ".join(str(step) for step in available)
        return f"no checkpoint at step {missing[0]}; the run has checkpoints at {listed}"
    return None


# --- the results table ---------------------------------------------------------------------
@dataclass
class ResultCell:
    """One policy on one task: the base model's accuracy, the checkpoint's, and the gain."""

    policy: str
    base: float | None = None
    value: float | None = None
    n: int | None = None

    @property
    def delta(self) -> float | None:
        if self.base is None or self.value is None:
            return None
        return self.value - self.base


@dataclass
class ResultRow:
    task: str
    cells: list[ResultCell]


@dataclass
class SuiteResults:
    """One suite's table: rows = tasks, a cell per policy, at checkpoint ``step``."""

    suite: str
    step: int | None
    """The latest evaluated checkpoint (None: only base models evaluated so far)."""
    policies: list[str]
    earlier_steps: list[int] = field(default_factory=list)
    """Other checkpoints evaluated (their values are the run's ``eval/...`` curves)."""
    rows: list[ResultRow] = field(default_factory=list)


def results_table(run: Run) -> list[SuiteResults]:
    """The run's evaluation results per suite, tasks sorted by name, policies in pool
    order (then any others): base (step 0) and the latest checkpoint step > 0."""
    points = (
        MetricPoint.objects.filter(series__run=run, series__key__startswith="eval/")
        .values_list("series__policy", "series__key", "step", "value")
        .order_by()
    )
    values: dict[tuple[str, str, str, str, int], float | None] = {}
    for policy, key, step, value in points:
        match = EVAL_KEY.match(key)
        if match:
            found = (match["suite"], match["task"], policy, match["metric"], step)
            values[found] = None if value is None or math.isnan(value) else value
    pool = run.policy_names
    tables = []
    for suite in sorted({k[0] for k in values}):
        mine = {k: v for k, v in values.items() if k[0] == suite}
        steps = [k[4] for k in mine if k[4] != BASE_STEP]
        step = max(steps) if steps else None
        named = {k[2] for k in mine}
        policies = [p for p in pool if p in named] + sorted(named - set(pool))
        earlier = sorted(set(steps) - {step})
        table = SuiteResults(suite=suite, step=step, policies=policies, earlier_steps=earlier)
        for task in sorted({k[1] for k in mine}):
            cells = []
            for policy in policies:
                n = mine.get((suite, task, policy, "n", step)) if step is not None else None
                cells.append(
                    ResultCell(
                        policy=policy,
                        base=mine.get((suite, task, policy, "accuracy", BASE_STEP)),
                        value=mine.get((suite, task, policy, "accuracy", step))
                        if step is not None
                        else None,
                        n=int(n) if n is not None else None,
                    )
                )
            table.rows.append(ResultRow(task=task, cells=cells))
        tables.append(table)
    return tables


def results_json(tables: list[SuiteResults]) -> list[dict[str, object]]:
    return [
        {
            "suite": table.suite,
            "step": table.step,
            "policies": table.policies,
            "earlier_steps": table.earlier_steps,
            "rows": [
                {
                    "task": row.task,
                    "cells": [
                        {
                            "policy": cell.policy,
                            "base": cell.base,
                            "value": cell.value,
                            "delta": cell.delta,
                            "n": cell.n,
                        }
                        for cell in row.cells
                    ],
                }
                for row in table.rows
            ],
        }
        for table in tables
    ]


def steps_label(evaluation: Evaluation) -> str:
    """What an evaluation covers, in words: "base + final checkpoint"."""
    words = {"final": "final checkpoint", "all": "all checkpoints", "none": ""}
    chosen = evaluation.steps.split(",")
    listed = f"step{'s' if len(chosen) > 1 else ''} {', '.join(chosen)}"
    label = words.get(evaluation.steps, listed)
    if evaluation.include_base:
        return f"base + {label}" if label else "base models"
    return label
