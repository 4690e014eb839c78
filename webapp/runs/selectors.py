"""Read-side queries for the pages: filtered, sorted lists the user may see."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Count, Max, QuerySet

from webapp.runs.models import Experiment, Run
from webapp.runs.permissions import visible_experiments, visible_runs

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
