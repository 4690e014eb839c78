"""The step rate measured on a backend and partition: what the compose and sweep forms'
wall-time estimates rest on (:func:`webapp.runs.compose_sizes.size_report` and
:meth:`webapp.runs.sweep_forms.SweepForm.size` take it as an argument; the pages that
show them read it here)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import Exists, F, OuterRef

from trainer.metrics import POOL, STEP_S
from webapp.metrics.models import MetricPoint, MetricSeries
from webapp.runs.compose_sizes import (
    HISTORY_RUNS,
    StepRate,
    combined_step_rate,
    comparable_size,
    pool_parameters,
    run_step_rate,
)
from webapp.runs.models import Run

SIZE_SCAN = 10
"""With a model size to match, up to ``SIZE_SCAN x limit`` recent runs are looked at to
find ``limit`` of that size."""


def measured_step_rate(
    backend: str, partition: str, *, limit: int = HISTORY_RUNS, parameters: int | None = None
) -> StepRate | None:
    """The step rate of the ``limit`` most recently finished completed runs on ``backend``
    and ``partition`` that recorded ``perf/step_s`` (the pool's, the slowest policy's)
    and, when ``parameters`` is given, whose largest model is of that size
    (:func:`webapp.runs.compose_sizes.comparable_size`); None when there is none."""
    measured = MetricSeries.objects.filter(run=OuterRef("pk"), policy=POOL, key=STEP_S)
    recent = Run.objects.filter(
        Exists(measured),
        state=Run.State.COMPLETED,
        backend=backend,
        experiment__resources__partition=partition,
    ).order_by(F("finished_at").desc(nulls_last=True), "-pk")
    runs: list[tuple[int, Any]]
    if parameters is None:
        runs = list(recent.values_list("pk", "config")[:limit])
    else:
        sizes: dict[str, int | None] = {}  # a pool's models -> its largest, read once
        runs = []
        for pk, config in recent.values_list("pk", "config")[: SIZE_SCAN * limit]:
            pool = config if isinstance(config, Mapping) else {}
            key = repr([p.get("model") for p in pool.get("pool") or [] if isinstance(p, Mapping)])
            if key not in sizes:
                sizes[key] = pool_parameters(pool)
            if comparable_size(parameters, sizes[key]):
                runs.append((pk, config))
                if len(runs) == limit:
                    break
    times: dict[int, list[float]] = {pk: [] for pk, _ in runs}
    points = MetricPoint.objects.filter(
        series__run_id__in=list(times), series__policy=POOL, series__key=STEP_S
    ).values_list("series__run_id", "value")
    for run_id, value in points:
        if value is not None:
            times[run_id].append(value)
    rates = []
    for pk, config in runs:
        rate = run_step_rate(times[pk], config if isinstance(config, Mapping) else {})
        if rate is not None:
            rates.append(rate)
    return combined_step_rate(rates)
