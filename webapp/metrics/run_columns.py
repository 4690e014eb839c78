"""A run's metric-derived facts for the pages: the lists' progress and val/reward@1
columns (one query a page) and a run page's progress (its ETA follows the last steps'
wall times). The arithmetic is pure, in :mod:`webapp.runs.progress`."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Max, OuterRef, Subquery
from django.utils import timezone

from trainer.metrics import POOL, VAL_REWARD_AT_1
from webapp.metrics import retention
from webapp.metrics.models import MetricPoint, MetricSeries
from webapp.runs.models import Run
from webapp.runs.progress import NO_VALUE, RECENT_STEPS, Progress, run_progress, total_steps_of


# --- progress and the val/reward@1 columns ----------------------------------------------
@dataclass(frozen=True)
class RewardColumns:
    """The pool mean of val/reward@1 (the ``_pool`` series): its value at the last step
    evaluated so far, and its best over the steps (NaN left out); None without points."""

    final: float | None = None
    best: float | None = None

    @property
    def final_text(self) -> str:
        return _significant(self.final)

    @property
    def best_text(self) -> str:
        return _significant(self.best)


def _significant(value: float | None) -> str:
    """4 significant digits; :data:`NO_VALUE` for no value, "NaN" for a NaN."""
    if value is None:
        return NO_VALUE
    return "NaN" if math.isnan(value) else f"{value:.4g}"


def reward_columns(run_ids: Iterable[int]) -> dict[int, RewardColumns]:
    """:class:`RewardColumns` of each run, in one query (a series of each run, read
    through its (series, step) primary key: the last point and the maximum)."""
    ids = list(run_ids)
    if not ids:
        return {}
    points = MetricPoint.objects.filter(series=OuterRef("pk"))
    best = (
        points.filter(value__lte=math.inf)  # leaves NaN out (PostgreSQL orders it last)
        .values("series")
        .annotate(best=Max("value"))
        .values("best")
    )
    rows = (
        MetricSeries.objects.filter(run_id__in=ids, policy=POOL, key=VAL_REWARD_AT_1)
        .annotate(
            final=Subquery(points.order_by("-step").values("value")[:1]),
            best=Subquery(best),
        )
        .values_list("pk", "run_id", "final", "best")
    )
    rows = list(rows)
    # a series without points may be one whose raw points were dropped: its pack's
    dropped = retention.dropped_points([pk for pk, _, final, _ in rows if final is None])
    found = {}
    for pk, run_id, final, best in rows:
        if dropped.get(pk):
            numbers = [value for _, value in dropped[pk] if not math.isnan(value)]
            final, best = dropped[pk][-1][1], max(numbers) if numbers else None
        found[run_id] = RewardColumns(final, best)
    return found


def with_list_columns(runs: Iterable[Run], now: datetime | None = None) -> list[Run]:
    """``runs`` with ``progress`` (rate: the average since the job's first trained step,
    :func:`~webapp.runs.progress.run_progress`'s ``pace``) and ``reward``
    (:class:`RewardColumns`) set on each, for a list page: one query in all."""
    runs = list(runs)
    now = now or timezone.now()
    rewards = reward_columns(run.pk for run in runs)
    for run in runs:
        run.progress = run_progress(
            state=run.state,
            last_step=run.last_step,
            total_steps=total_steps_of(run.config),
            started_at=run.started_at,
            finished_at=run.finished_at,
            now=now,
            pace=(run.pace_step, run.pace_at),
        )
        run.reward = rewards.get(run.pk, RewardColumns())
    return runs


def recent_step_times(run: Run, window: int = RECENT_STEPS) -> list[tuple[int, float]]:
    """(step, latest wall time of its points) of ``run``'s last ``window`` steps."""
    if run.last_step is None:
        return []
    rows = (
        MetricPoint.objects.filter(
            series__run=run, step__gt=run.last_step - window, wall_time__isnull=False
        )
        .values("step")
        .annotate(at=Max("wall_time"))
        .values_list("step", "at")
    )
    return sorted((step, at) for step, at in rows if at is not None)


def progress_of_run(run: Run, now: datetime | None = None) -> Progress:
    """``run``'s progress for its own page: the ETA follows its last steps' rate."""
    return run_progress(
        state=run.state,
        last_step=run.last_step,
        total_steps=total_steps_of(run.config),
        started_at=run.started_at,
        finished_at=run.finished_at,
        now=now or timezone.now(),
        recent=() if run.is_terminal else recent_step_times(run),
    )
