"""The runs API for code: ``GET /api/v1/runs`` (filtered, cursor pages, with the final and
best values of chosen metrics) and ``GET /api/v1/runs/<id>/history`` (several metrics of
one run at once, against step, rollouts or tokens).

Auth as every read of the API (:func:`webapp.core.http.login_required_json`): a session
or a personal read token; the lab's permissions as on the pages (a run of another lab is
never listed, and its history is 404). Each view's docstring gives its reply's shape.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.views.decorators.cache import never_cache

from trainer.wire import MAX_INT32, MAX_KEY, MAX_POLICY_NAME
from webapp.core.http import (
    ParamError,
    allow_methods,
    choice_param,
    encode_value,
    encode_values,
    flag_param,
    int_param,
    json_reply,
    login_required_json,
    text_params,
)
from webapp.core.permissions import get_viewable
from webapp.metrics.history import X_AXES, History, run_history
from webapp.metrics.run_values import SeriesValues, run_values
from webapp.runs.api_query import (
    ORDERS,
    page_limit,
    run_query_from_params,
    runs_page,
    tags_of_runs,
)
from webapp.runs.models import Run

MAX_METRICS = 32
MAX_HISTORY_POINTS = 1_000_000
"""The largest ``max_points`` a history request may ask for (absent: every point)."""


def _timestamp(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _values_json(values: SeriesValues) -> dict[str, Any]:
    return {
        "final": encode_value(values.final),
        "final_step": values.final_step,
        "best": encode_value(values.best),
        "best_step": values.best_step,
        "n_points": values.n_points,
    }


def _run_json(
    request: HttpRequest,
    run: Run,
    tags: list[str],
    metrics: dict[str, dict[str, SeriesValues]],
) -> dict[str, Any]:
    experiment = run.experiment
    duration = (
        (run.finished_at - run.started_at).total_seconds()
        if run.started_at is not None and run.finished_at is not None
        else None
    )
    return {
        "id": run.pk,
        "name": run.name,
        "experiment": {"id": experiment.pk, "name": experiment.name},
        "sweep": experiment.sweep_id,
        "lab": experiment.lab.name,
        "owner": experiment.owner.get_username(),
        "state": run.state,
        "regime": run.regime,
        "off_policy": run.off_policy,
        "seed": run.seed,
        "policies": run.policy_names,
        "tags": tags,
        "config": run.config,
        "last_step": run.last_step,
        "created_at": _timestamp(run.created_at),
        "queued_at": _timestamp(run.queued_at),
        "submitted_at": _timestamp(run.submitted_at),
        "started_at": _timestamp(run.started_at),
        "finished_at": _timestamp(run.finished_at),
        "duration_s": duration,
        "metrics": {
            key: {policy: _values_json(by_policy[policy]) for policy in sorted(by_policy)}
            for key, by_policy in sorted(metrics.items())
        },
        "links": {
            "page": request.build_absolute_uri(run.get_absolute_url()),
            "history": request.build_absolute_uri(reverse("api:history", args=[run.pk])),
            "events": request.build_absolute_uri(reverse("api:events", args=[run.pk])),
            "status": request.build_absolute_uri(reverse("api:status", args=[run.pk])),
        },
    }


def _with_relations(runs: QuerySet[Run]) -> QuerySet[Run]:
    """What :func:`_run_json` reads of each run but its tags, in the page's statement."""
    return runs.select_related("experiment", "experiment__owner", "experiment__lab")


@never_cache
@allow_methods("GET")
@login_required_json
def runs(request: HttpRequest) -> HttpResponse:
    """``?<filters>&metric=K&policy=P&lower_is_better=1&order=-id|id&limit=N&cursor=C``
    (the filters: :mod:`webapp.runs.api_query`) -> ``{"total", "count", "order", "limit",
    "next_cursor", "next" (the next page's URL, null on the last), "runs": [{"id", "name",
    "experiment": {"id", "name"}, "sweep", "lab", "owner", "state", "regime",
    "off_policy", "seed", "policies", "tags", "config", "last_step", "created_at",
    "queued_at", "submitted_at", "started_at", "finished_at", "duration_s", "metrics":
    {key: {policy: {"final", "final_step", "best", "best_step", "n_points"}}}, "links":
    {"page", "history", "events", "status"}}]}``. ``metrics`` holds the ``metric`` keys
    asked for (every policy's, or the ``policy`` ones), a run without a series left out."""
    query = run_query_from_params(request.GET)
    keys = text_params(request.GET, "metric", MAX_KEY)
    if len(keys) > MAX_METRICS:
        raise ParamError(f"metric: at most {MAX_METRICS} metrics, not {len(keys)}")
    policies = text_params(request.GET, "policy", MAX_POLICY_NAME)
    lower = flag_param(request.GET, "lower_is_better")
    order = choice_param(request.GET, "order", ORDERS) or ORDERS[0]
    cursor = request.GET.get("cursor", "")
    if len(cursor) > 200:
        raise ParamError("cursor: not a cursor of this API (take the reply's next link)")
    page = runs_page(
        request.user,
        query,
        order=order,
        limit=page_limit(request.GET),
        cursor=cursor or None,
        prepare=_with_relations,
    )
    tags = tags_of_runs(page.runs)
    values = run_values(
        [run.pk for run in page.runs], keys, policies=policies, lower_is_better=lower
    )
    next_url = None
    if page.next_cursor is not None:
        params = request.GET.copy()
        params["cursor"] = page.next_cursor
        next_url = request.build_absolute_uri(f"{reverse('api:runs')}?{params.urlencode()}")
    return json_reply(
        {
            "total": page.total,
            "count": len(page.runs),
            "order": page.order,
            "limit": page.limit,
            "next_cursor": page.next_cursor,
            "next": next_url,
            "runs": [_run_json(request, run, tags[run.pk], values[run.pk]) for run in page.runs],
        }
    )


def _history_json(history: History) -> dict[str, Any]:
    series = []
    for entry in history.series:
        item: dict[str, Any] = {
            "policy": entry.policy,
            "key": entry.key,
            "n_points": entry.n_points,
            "downsampled": entry.downsampled,
            "step": entry.steps,
            "value": encode_values(entry.values),
        }
        if entry.x is not None:
            item["x"] = entry.x
        series.append(item)
    return {
        "run": history.run,
        "x": history.x,
        "max_points": history.max_points,
        "series": series,
        "notes": history.notes,
    }


@never_cache
@allow_methods("GET")
@login_required_json
def history(request: HttpRequest, run_id: int) -> HttpResponse:
    """``?key=K&key=K2&policy=P&x=step|rollouts|tokens&max_points=N&after_step=S`` ->
    ``{"run", "x", "max_points", "series": [{"policy", "key", "n_points", "downsampled",
    "step": [...], "value": [...], "x": [...] (not on the step axis; null where unknown)}],
    "notes"}``: every point of each series (by step), or with ``max_points`` at most that
    many (min/max buckets, the extremes kept). No ``key``: every metric; no ``policy``:
    every policy. Values may be "NaN", "Infinity", "-Infinity"."""
    run: Run = get_viewable(request.user, Run.objects.select_related("experiment"), run_id)
    keys = text_params(request.GET, "key", MAX_KEY)
    policies = text_params(request.GET, "policy", MAX_POLICY_NAME)
    x = choice_param(request.GET, "x", X_AXES) or "step"
    max_points = int_param(request.GET, "max_points", None, low=4, high=MAX_HISTORY_POINTS)
    after_step = int_param(request.GET, "after_step", None, low=-1, high=MAX_INT32)
    found = run_history(
        run,
        keys=keys,
        policies=policies,
        x=x,
        max_points=max_points,
        after_step=-1 if after_step is None else after_step,
    )
    return json_reply(_history_json(found))
