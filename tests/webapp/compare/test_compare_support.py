"""Helpers of the comparison tests (plain functions, no tests): runs and their points."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.contrib.auth.models import User
from django.http import QueryDict

from tests.conftest import pool_config
from webapp.compare.spec import ComparisonSpec
from webapp.metrics.models import MetricPoint, MetricSeries
from webapp.runs import services
from webapp.runs.models import Run

POLICIES = ("llama", "qwen", "gpt2")


def make_runs(owner: User, regime: str, seeds: Iterable[int] = (0, 1), **config: Any) -> list[Run]:
    """One run per seed of a fresh experiment of ``owner`` (pool: llama, qwen, gpt2)."""
    experiment = services.experiment_create(
        owner=owner,
        config=pool_config(name=f"{regime}-exp", regime=regime, **config),
        seeds=list(seeds),
    )
    return services.runs_create(experiment)


def add_series(
    run: Run,
    policy: str,
    key: str,
    steps: Iterable[int],
    value: Callable[[int], float | None],
    wall: Callable[[int], float | None] = lambda step: 1.7e9 + step,
) -> int:
    """A series of ``run`` with ``value(step)`` (and ``wall(step)``) at ``steps``."""
    series = MetricSeries.objects.create(run=run, policy=policy, key=key)
    MetricPoint.objects.bulk_create(
        MetricPoint(series=series, step=step, value=value(step), wall_time=wall(step))
        for step in steps
    )
    return series.pk


def spec_of(**params: Any) -> ComparisonSpec:
    """A spec from query parameters (lists for repeated ones)."""
    query = QueryDict(mutable=True)
    for name, value in params.items():
        query.setlist(
            name, [str(v) for v in value] if isinstance(value, list | tuple) else [str(value)]
        )
    return ComparisonSpec.from_query(query)
