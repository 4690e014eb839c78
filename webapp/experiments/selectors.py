"""Read-side queries for the pages: filtered, sorted lists the user may see."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Count, Max, OuterRef, QuerySet, Subquery
from django.utils import timezone

from trainer.metrics import POOL, VAL_REWARD_AT_1
from webapp.experiments.models import Experiment, MetricPoint, MetricSeries, Run
from webapp.experiments.permissions import visible_experiments, visible_runs
from webapp.experiments.progress import (
    NO_VALUE,
    RECENT_STEPS,
    Progress,
    run_progress,
    total_steps_of,
)

EXPERIMENT_SORTS = {
    "created": "created_at",
    "name": "name",
    "owner": "owner__username",
    "regime": "regime",
    "runs": "run_count",
}
RUN_SORTS = {
    "created": "created_at",
    "name": "name",
    "owner": "experiment__owner__username",
    "regime": "regime",
    "state": "state",
    "step": "last_step",
    "seed": "seed",
}


DEFAULT_SORT = "-created"  # newest first


@dataclass(frozen=True)
class ListFilters:
    """What a list page was asked for (already validated)."""

    owner: str = ""
    regime: str = ""
    state: str = ""
    tag: str = ""
    q: str = ""
    sort: str = DEFAULT_SORT


def _order(sort: str, columns: dict[str, str]) -> list[str]:
    descending = sort.startswith("-")
    column = columns.get(sort.lstrip("-"), "created_at")
    return [("-" if descending else "") + column, "-id"]


def experiments_for_list(
    user: AbstractBaseUser | AnonymousUser, filters: ListFilters
) -> QuerySet[Experiment]:
    queryset = visible_experiments(user).select_related("owner").prefetch_related("tags")
    queryset = queryset.annotate(run_count=Count("runs", distinct=True))
    if filters.owner:
        queryset = queryset.filter(owner__username=filters.owner)
    if filters.regime:
        queryset = queryset.filter(regime=filters.regime)
    if filters.state:
        queryset = queryset.filter(runs__state=filters.state)
    if filters.tag:
        queryset = queryset.filter(tags__name=filters.tag)
    if filters.q:
        queryset = queryset.filter(name__icontains=filters.q)
    return queryset.distinct().order_by(*_order(filters.sort, EXPERIMENT_SORTS))


def runs_for_list(user: AbstractBaseUser | AnonymousUser, filters: ListFilters) -> QuerySet[Run]:
    queryset = visible_runs(user).select_related("experiment", "experiment__owner")
    if filters.owner:
        queryset = queryset.filter(experiment__owner__username=filters.owner)
    if filters.regime:
        queryset = queryset.filter(regime=filters.regime)
    if filters.state:
        queryset = queryset.filter(state=filters.state)
    if filters.tag:
        queryset = queryset.filter(tags__name=filters.tag) | queryset.filter(
            experiment__tags__name=filters.tag
        )
    if filters.q:
        queryset = queryset.filter(name__icontains=filters.q)
    return queryset.distinct().order_by(*_order(filters.sort, RUN_SORTS))


def experiment_run_summary(experiment: Experiment) -> dict[str, int]:
    """Runs of ``experiment`` per state."""
    rows = experiment.runs.values("state").annotate(n=Count("id"), last=Max("last_step"))
    return {row["state"]: row["n"] for row in rows}


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
        .values_list("run_id", "final", "best")
    )
    return {run_id: RewardColumns(final, best) for run_id, final, best in rows}


def with_list_columns(runs: Iterable[Run], now: datetime | None = None) -> list[Run]:
    """``runs`` with ``progress`` (rate: the average since the job's first trained step,
    :func:`~webapp.experiments.progress.run_progress`'s ``pace``) and ``reward``
    (:class:`RewardColumns`) set on each, for a list page: one query in all."""
    runs = list(runs)
    now = now or timezone.now()
    rewards = reward_columns(run.pk for run in runs)
    for run in runs:
        run.progress = run_progress(  # type: ignore[attr-defined]
            state=run.state,
            last_step=run.last_step,
            total_steps=total_steps_of(run.config),
            started_at=run.started_at,
            finished_at=run.finished_at,
            now=now,
            pace=(run.pace_step, run.pace_at),
        )
        run.reward = rewards.get(run.pk, RewardColumns())  # type: ignore[attr-defined]
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
