"""The JSON API: ingestion (run token) and the run page's reads (session, lab visibility).

Ingestion auth, in order: no or an unknown/revoked token -> 401; a valid token of
another run -> 403, whether or not the run in the URL exists (so a token cannot probe
for run ids; a 404 never comes from this endpoint). Only then is the body read: at most
:data:`MAX_BODY_BYTES` (413 above), instead of Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE``
(2.5 MB), which a legal 10,000-point batch with long names can exceed.

The read endpoints answer 401 to anonymous users and 404 to users outside the run's
lab (its existence does not leak). Each view's docstring gives its response shape.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt

from trainer.wire import (
    MAX_EVENT_SAMPLES,
    MAX_INT32,
    MAX_KEY,
    MAX_POLICY_NAME,
    MAX_SAMPLE_TEXT,
    MAX_SAMPLE_TOKENS,
    event_kind_names,
    event_kinds,
)
from webapp.core.digits import ascii_digits
from webapp.core.http import (
    ParamError,
    allow_methods,
    bearer_token,
    choice_param,
    encode_points,
    encode_value,
    int_param,
    json_error,
    json_reply,
    login_required_json,
    text_params,
)
from webapp.core.permissions import get_viewable
from webapp.core.selectors import worker_status
from webapp.metrics import selectors
from webapp.metrics.batch import BatchError, parse_batch
from webapp.metrics.ingest import RunGone, metrics_ingest
from webapp.metrics.models import TransferEvent
from webapp.metrics.run_columns import progress_of_run
from webapp.runs import services
from webapp.runs.models import Run
from webapp.runs.prompts import prompt_text

MAX_BODY_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_POINTS, MAX_MAX_POINTS = 2000, 10_000
DEFAULT_EVENTS_LIMIT, MAX_EVENTS_LIMIT = 100, 1000
DEFAULT_SUMMARY_BUCKETS, MAX_SUMMARY_BUCKETS = 50, 1000


# --------------------------------------------------------------------------- ingestion


def read_body(request: HttpRequest, limit: int) -> bytes:
    """The request body, or :class:`BatchError` (413) when it is longer than ``limit``."""
    declared = ascii_digits(request.META.get("CONTENT_LENGTH") or "0", max_digits=30)
    if declared is not None and declared > limit:
        raise BatchError(f"body: {declared} bytes; at most {limit} per batch", 413)
    chunks, size = [], 0
    try:
        while size <= limit:
            chunk = request.read(min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except RequestDataTooBig:
        raise BatchError(f"body: more than {limit} bytes per batch", 413) from None
    if size > limit:
        raise BatchError(f"body: more than {limit} bytes per batch", 413)
    return b"".join(chunks)


@csrf_exempt
@allow_methods("POST")
def ingest(request: HttpRequest, run_id: int) -> HttpResponse:
    """SPEC 8.1. 200 ``{"accepted": n, "duplicates": k, "points": {"accepted", "duplicates"},
    "events": {"accepted", "duplicates"}[, "status": {"state", "applied"[, "reason"]}]}``."""
    token = bearer_token(request)
    run = services.run_for_token(token) if token else None
    if run is None:
        return _token_refused()
    if run.pk != run_id:
        return json_error(f"this token belongs to another run, not run {run_id}", 403)
    try:
        batch = parse_batch(read_body(request, MAX_BODY_BYTES))
    except BatchError as exc:
        return json_error(str(exc), exc.status)
    try:
        return json_reply(metrics_ingest(run=run, batch=batch).as_json())
    except RunGone:  # deleted after its token was checked: what a retry would be told
        return _token_refused()


def _token_refused() -> HttpResponse:
    return json_error(
        "missing, wrong or revoked run token (Authorization: Bearer <token>)",
        401,
        headers={"WWW-Authenticate": 'Bearer realm="ingest"'},
    )


# --------------------------------------------------------------------------- reads


def _viewable_run(request: HttpRequest, run_id: int) -> Run:
    return get_viewable(request.user, Run.objects.select_related("experiment"), run_id)


@never_cache
@allow_methods("GET")
@login_required_json
def series(request: HttpRequest, run_id: int) -> HttpResponse:
    """``?key=K&key=K2&policy=P&max_points=N&after_step=S`` ->
    ``{"run", "max_points", "after_step", "series": [{"policy", "key", "n_points",
    "downsampled", "points": [[step, value], ...]}]}``; values may be "NaN"/"Infinity"/
    "-Infinity". ``n_points`` counts the points with step > after_step."""
    run = _viewable_run(request, run_id)
    keys = text_params(request.GET, "key", MAX_KEY)
    policies = text_params(request.GET, "policy", MAX_POLICY_NAME)
    max_points = int_param(
        request.GET, "max_points", DEFAULT_MAX_POINTS, low=4, high=MAX_MAX_POINTS
    )
    after_step = int_param(request.GET, "after_step", None, low=-1, high=MAX_INT32)
    chosen = selectors.series_of_run(run, keys=keys, policies=policies)
    found = selectors.series_points(
        [s.pk for s in chosen],
        max_points=max_points or DEFAULT_MAX_POINTS,
        after_step=-1 if after_step is None else after_step,
    )
    return json_reply(
        {
            "run": run.pk,
            "max_points": max_points,
            "after_step": after_step,
            "series": [_series_json(s.policy, s.key, found[s.pk]) for s in chosen],
        }
    )


def _series_json(policy: str, key: str, points: selectors.SeriesPoints) -> dict[str, Any]:
    return {
        "policy": policy,
        "key": key,
        "n_points": points.n_points,
        "downsampled": points.downsampled,
        "points": encode_points(points.points),
    }


@never_cache
@allow_methods("GET")
@login_required_json
def keys(request: HttpRequest, run_id: int) -> HttpResponse:
    """``{"run", "keys": [{"policy", "key", "n_points", "last_step", "last_value"}]}``."""
    run = _viewable_run(request, run_id)
    rows = selectors.series_summaries(run)
    return json_reply(
        {
            "run": run.pk,
            "keys": [
                {
                    "policy": row.policy,
                    "key": row.key,
                    "n_points": row.n_points,
                    "last_step": row.last_step,
                    "last_value": encode_value(row.last_value),
                }
                for row in rows
            ],
        }
    )


def _event_filters(request: HttpRequest) -> selectors.EventFilters:
    step_min = int_param(request.GET, "step_min", None, low=0, high=MAX_INT32)
    step_max = int_param(request.GET, "step_max", None, low=0, high=MAX_INT32)
    if step_min is not None and step_max is not None and step_min > step_max:
        raise ParamError(f"step_min: {step_min} is above step_max ({step_max})")
    return selectors.EventFilters(
        source=(text_params(request.GET, "source", MAX_POLICY_NAME) or [""])[0],
        target=(text_params(request.GET, "target", MAX_POLICY_NAME) or [""])[0],
        kind=choice_param(request.GET, "kind", event_kind_names()),
        step_min=step_min,
        step_max=step_max,
    )


def _event_json(event: TransferEvent) -> dict[str, Any]:
    return {
        "id": event.pk,
        "step": event.step,
        "source": event.source,
        "target": event.target,
        "kind": event.kind,
        "prompt_id": event.prompt_id,
        "count": event.count,
        "weight": event.weight,
        "has_samples": getattr(event, "has_samples", event.samples is not None),
    }


@never_cache
@allow_methods("GET")
@login_required_json
def events(request: HttpRequest, run_id: int) -> HttpResponse:
    """``?source=&target=&kind=&step_min=&step_max=&limit=&offset=`` ->
    ``{"run", "total", "limit", "offset", "events": [{"id", "step", "source", "target",
    "kind", "prompt_id", "count", "weight", "has_samples"}]}`` ordered by step. What
    crossed (the samples) is left out, to keep a page small: :func:`event_detail`."""
    run = _viewable_run(request, run_id)
    filters = _event_filters(request)
    limit = int_param(request.GET, "limit", DEFAULT_EVENTS_LIMIT, low=1, high=MAX_EVENTS_LIMIT)
    offset = int_param(request.GET, "offset", 0, low=0)
    total, page = selectors.events_page(run, filters, limit=limit or 1, offset=offset or 0)
    return json_reply(
        {
            "run": run.pk,
            "total": total,
            "limit": limit,
            "offset": offset,
            "events": [_event_json(event) for event in page],
        }
    )


def _no_text_note(kind: str) -> str | None:
    """The declared sentence for an event kind that never carries text, else None."""
    declared = next((k for k in event_kinds() if k.name == kind), None)
    return declared.no_text if declared is not None and declared.no_text else None


MAX_ID = 2**63 - 1  # larger ids are no event's (PostgreSQL would refuse the number)


@never_cache
@allow_methods("GET")
@login_required_json
def event_detail(request: HttpRequest, run_id: int, event_id: int) -> HttpResponse:
    """One event with what crossed: ``{"run", "regime", "event": {...as in the list},
    "prompt_text" (the prompt's text, or null: :func:`prompt_text`),
    "samples": [{"text", "tokens"?, "reward"?, "finished"?, "reason"?, "truncated"}] or
    null (not recorded),
    "limits": {"samples", "text", "tokens"}}``; 404 when the run has no such event."""
    run = _viewable_run(request, run_id)
    event = selectors.event_of_run(run, event_id) if event_id <= MAX_ID else None
    if event is None:
        return json_error("no such event in this run", 404)
    return json_reply(
        {
            "run": run.pk,
            "regime": run.regime,
            "event": _event_json(event),
            "prompt_text": prompt_text(run.config, event.prompt_id),
            "samples": event.samples,
            "no_text": _no_text_note(event.kind),
            "limits": {
                "samples": MAX_EVENT_SAMPLES,
                "text": MAX_SAMPLE_TEXT,
                "tokens": MAX_SAMPLE_TOKENS,
            },
        }
    )


@never_cache
@allow_methods("GET")
@login_required_json
def events_summary(request: HttpRequest, run_id: int) -> HttpResponse:
    """``?source=&target=&kind=&step_min=&step_max=&buckets=N`` (the log's filters) ->
    ``{"run", "policies": [...], "matrix": [[count of source i -> target j]], "kinds",
    "total", "bucket_size", "over_time": [{"step", "kind", "count"}]}``."""
    run = _viewable_run(request, run_id)
    filters = _event_filters(request)
    buckets = int_param(
        request.GET, "buckets", DEFAULT_SUMMARY_BUCKETS, low=1, high=MAX_SUMMARY_BUCKETS
    )
    summary = selectors.events_summary(run, filters, buckets=buckets or DEFAULT_SUMMARY_BUCKETS)
    return json_reply(
        {
            "run": run.pk,
            "policies": summary.policies,
            "matrix": summary.matrix,
            "kinds": summary.kinds,
            "total": summary.total,
            "bucket_size": summary.bucket_size,
            "over_time": summary.over_time,
        }
    )


def _timestamp(run: Run, name: str) -> str | None:
    value = getattr(run, name)
    return None if value is None else value.isoformat()


@never_cache
@allow_methods("GET")
@login_required_json
def status(request: HttpRequest, run_id: int) -> HttpResponse:
    """``{"run", "name", "state", "is_terminal", "status_message", "last_step", "backend",
    "slurm_job_id", "node", "worker_nodes" (``"a on node1, b on node2"``), "exit_code",
    "failure_reason", "has_token", "created_at",
    "queued_at", "submitted_at", "started_at", "finished_at", "updated_at"}`` (ISO 8601 or
    null), the progress: ``"total_steps"``, ``"elapsed_s"`` (the duration once finished),
    ``"eta_s"``, ``"steps_per_s"`` (the last steps' rate; null when unknown),
    ``"progress"`` (0..1), ``"progress_text"`` (what the page shows), and the timeline:
    ``"timeline": [{"at", "state", "note"}]`` (oldest first)."""
    run = _viewable_run(request, run_id)
    reply: dict[str, Any] = {
        "run": run.pk,
        "name": run.name,
        "state": run.state,
        "is_terminal": run.is_terminal,
        "status_message": run.status_message,
        "last_step": run.last_step,
        "backend": run.backend,
        "slurm_job_id": run.slurm_job_id,
        "node": run.node,
        "worker_nodes": run.worker_nodes_text,
        "exit_code": run.exit_code,
        "failure_reason": run.failure_reason,
        "has_token": bool(run.token_hash),
    }
    for name in (
        "created_at",
        "queued_at",
        "submitted_at",
        "started_at",
        "finished_at",
        "updated_at",
    ):
        reply[name] = _timestamp(run, name)
    reply.update(progress_of_run(run).as_json())
    reply["timeline"] = [
        {"at": change.at.isoformat(), "state": change.state, "note": change.note}
        for change in run.state_changes.all()
    ]
    return json_reply(reply)


@never_cache
@allow_methods("GET")
@login_required_json
def worker(request: HttpRequest) -> HttpResponse:
    """Whether a Celery worker reported in recently: ``{"online", "last_seen" (ISO 8601 or
    null), "seconds_since" (null if none ever did), "offline_after_seconds", "message"}``;
    ``message`` is "" when online. The run, experiment and sweep pages poll it."""
    return json_reply(worker_status().as_json())
