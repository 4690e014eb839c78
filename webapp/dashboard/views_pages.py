"""Experiments and runs: lists, detail pages and their owner-only actions.

Thin views: queries live in ``selectors``, changes in ``services``, who-may-what in
``permissions``. Every state-changing view is POST-only (CSRF-checked by the middleware).
"""

from __future__ import annotations

import json
import re
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST, require_safe

from scheduler import launch
from scheduler.backends import log_tail
from scheduler.dispatch import enqueue_cancel
from scheduler.jobs import JobSpecError
from scheduler.run_job import job_spec
from trainer.config import ConfigError, RunConfig, scoring_summary
from trainer.metrics import (
    ERROR_CLASSES,
    POOL,
    POOL_REDUCTIONS,
    VAL_ERROR_PREFIX,
    policy_label,
)
from trainer.regimes import REGIMES, regime_spec
from trainer.tasks.addition_slices import SLICES
from trainer.wire import event_kinds
from webapp.core.permissions import can_edit, get_editable, get_viewable
from webapp.core.selectors import worker_status
from webapp.evals.evaluations import checkpoint_steps
from webapp.evals.forms import EvaluateForm
from webapp.metrics.catalogue import families_as_json, groups_as_json, metrics_as_json
from webapp.metrics.run_columns import progress_of_run, with_list_columns
from webapp.registry.models import EvalSuite
from webapp.runs import services
from webapp.runs.filters import experiment_filter_form, run_filter_form
from webapp.runs.models import Experiment, Run
from webapp.runs.selectors import experiment_run_summary, experiments_for_list, runs_for_list

PAGE_SIZE = 25
TAG_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,47}")


def _page(request: HttpRequest, queryset: object) -> object:
    paginator = Paginator(queryset, PAGE_SIZE)  # type: ignore[arg-type]
    return paginator.get_page(request.GET.get("page"))


def _query_without_page(request: HttpRequest) -> str:
    query = request.GET.copy()
    query.pop("page", None)
    return query.urlencode()


# --- experiments -----------------------------------------------------------------------
@login_required
@require_safe
def experiment_list(request: HttpRequest) -> HttpResponse:
    form = experiment_filter_form(request.GET or None)
    page = _page(request, experiments_for_list(request.user, form.filters()))
    context = {"form": form, "page": page, "query": _query_without_page(request)}
    return render(request, "dashboard/experiment_list.html", context)


@login_required
@require_safe
def experiment_detail(request: HttpRequest, pk: int) -> HttpResponse:
    experiment = get_viewable(request.user, Experiment.objects.select_related("owner"), pk)
    context = {
        "experiment": experiment,
        "runs": experiment.runs.order_by("seed", "id"),
        "run_summary": experiment_run_summary(experiment),
        "config_json": json.dumps(experiment.config, indent=2),
        "placement": experiment.resources.get("placement"),
        "resources": {k: v for k, v in experiment.resources.items() if k != "placement"},
        "can_edit": can_edit(request.user, experiment),
        "eval_suites": EvalSuite.objects.filter(lab=experiment.lab_id),
        "worker": worker_status(),
    }
    return render(request, "dashboard/experiment_detail.html", context)


@login_required
@require_POST
def experiment_clone(request: HttpRequest, pk: int) -> HttpResponse:
    """Any lab member may clone an experiment into a new draft of their own."""
    experiment = get_viewable(request.user, Experiment.objects.all(), pk)
    clone = services.experiment_clone(experiment, owner=request.user)
    messages.success(request, f"Cloned into the new draft {clone.name!r}; edit it, then launch.")
    return redirect("dashboard:experiment_edit", pk=clone.pk)


@login_required
@require_POST
def experiment_launch(request: HttpRequest, pk: int) -> HttpResponse:
    experiment = get_editable(request.user, Experiment.objects.all(), pk)
    runs = launch.experiment_launch(experiment)
    message = f"Queued {len(runs)} run(s) of {experiment.name}."
    notice = worker_status().notice("the runs will start when a worker is back")
    messages.success(request, f"{message} {notice}." if notice else message)
    return redirect(experiment)


@login_required
@require_POST
def experiment_delete(request: HttpRequest, pk: int) -> HttpResponse:
    experiment = get_editable(request.user, Experiment.objects.all(), pk)
    active = experiment.runs.exclude(state__in=[*Run.TERMINAL_STATES, Run.State.DRAFT])
    if active.exists():
        messages.error(request, "Cancel its active runs before deleting this experiment.")
        return redirect(experiment)
    name = experiment.name
    experiment.delete()
    messages.success(request, f"Deleted experiment {name!r} and its runs.")
    return redirect("dashboard:experiment_list")


# --- runs ------------------------------------------------------------------------------
RUN_LIST_OPTIONAL_COLUMNS = (("owner", "Owner"), ("job", "Job"), ("created", "Created"))
"""The runs list's columns shown on request (its column chooser), so the ones read most
fit a laptop's window."""


@login_required
@require_safe
def run_list(request: HttpRequest) -> HttpResponse:
    form = run_filter_form(request.GET or None)
    page = _page(request, runs_for_list(request.user, form.filters()))
    page.object_list = with_list_columns(page.object_list)  # type: ignore[attr-defined]
    context = {
        "form": form,
        "page": page,
        "query": _query_without_page(request),
        "optional_columns": RUN_LIST_OPTIONAL_COLUMNS,
    }
    return render(request, "dashboard/run_list.html", context)


def run_scoring_text(config: Any) -> str | None:
    """Which scoring rule a run applies (:func:`trainer.config.scoring_summary`: its
    ``task.finished_only`` resolved over its pool); None for a config that does not read."""
    try:
        return scoring_summary(RunConfig.from_dict(config))
    except ConfigError:
        return None


@login_required
@require_safe
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_viewable(request.user, Run.objects.select_related("experiment__owner"), pk)
    page_config = {
        "runId": run.pk,
        "policies": [*run.policy_names, POOL],
        "groups": groups_as_json(),
        "metrics": metrics_as_json(),
        "metricFamilies": families_as_json(),
        "poolLabels": {key: policy_label(POOL, key) for key in POOL_REDUCTIONS},
        "eventKinds": {kind.name: kind.label for kind in event_kinds()},
        "errorClasses": error_classes_table(),
        "urls": {
            "status": reverse("api:status", args=[run.pk]),
            "keys": reverse("api:keys", args=[run.pk]),
            "series": reverse("api:series", args=[run.pk]),
            "events": reverse("api:events", args=[run.pk]),
            "eventsSummary": reverse("api:events_summary", args=[run.pk]),
            "log": reverse("dashboard:run_log", args=[run.pk]),
            "curvesCsv": reverse("metrics:run_curves_csv", args=[run.pk]),
            "metricCsv": reverse("metrics:run_metric_csv", args=[run.pk]),
            "evaluations": reverse("evals:run_evaluations", args=[run.pk]),
        },
        "pollMs": 2000,
    }
    context = {
        "run": run,
        "experiment": run.experiment,
        "config_json": json.dumps(run.config, indent=2),
        "scoring": run_scoring_text(run.config),
        "state_changes": run.state_changes.all(),
        "progress": progress_of_run(run),
        "page_config": page_config,
        "error_classes": page_config["errorClasses"]["classes"],
        "can_edit": can_edit(request.user, run),
        "new_token": request.session.pop(f"run-token-{run.pk}", None),
        **_transfer_panel(run.config),
        **_evaluation_panel(run),
        "worker": worker_status(),
    }
    return render(request, "dashboard/run_detail.html", context)


def error_classes_table() -> dict[str, Any]:
    """What the run page's "Answers by error class" table reads (run-error-classes.js):
    the key prefix of its points (``val/error/<class>/<slice>``, which the curves leave
    out), the classes in their order with the names people read ("dropped carry"), and
    the slices in their order."""
    return {
        "prefix": VAL_ERROR_PREFIX,
        "classes": [{"key": name, "label": name.replace("_", " ")} for name in ERROR_CLASSES],
        "slices": list(SLICES),
    }


def _evaluation_panel(run: Run) -> dict[str, Any]:
    """The evaluation panel's context: the "Evaluate" form once the run has a directory
    and its lab a suite, and the checkpoints it offers."""
    checkpoints = checkpoint_steps(run)
    has_suites = EvalSuite.objects.filter(lab=run.experiment.lab_id).exists()
    form = EvaluateForm(run=run, steps=checkpoints) if has_suites and run.run_dir else None
    return {"eval_form": form, "checkpoints": checkpoints, "has_suites": has_suites}


def _transfer_panel(config: dict[str, Any]) -> dict[str, Any]:
    """The transfer panel's context from the run's regime declaration: what it says when
    nothing crosses (``transfers_note``), else the event kinds its filter offers."""
    regime = config.get("regime")
    if regime not in REGIMES:  # a plug-in this server does not have: offer every kind
        return {"transfers_note": None, "event_kinds": event_kinds()}
    spec = regime_spec(regime)
    note = spec.no_transfers_note(spec.settings_from(config.get(regime)))
    return {"transfers_note": note, "event_kinds": list(spec.event_kinds)}


def resume_point(run: Run) -> str:
    """Where a resubmission of ``run`` starts, in words: "it resumes from its checkpoint
    of step 40", or "it has no checkpoint, so it starts over from step 1" (the trainer
    resumes from the run directory's latest complete checkpoint, :func:`checkpoint_steps`,
    and starts over without one)."""
    steps = checkpoint_steps(run)
    if steps:
        return f"it resumes from its checkpoint of step {steps[-1]}"
    return "it has no checkpoint, so it starts over from step 1"


CONFIRM_CANCEL = "yes"
"""The ``confirm`` a cancel POST carries once the user has confirmed (the run page's
dialog, or the confirmation page a POST without it gets)."""


@login_required
@require_POST
def run_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    """Stop the run: a queued run is cancelled at once, a submitted one by its job. A POST
    without ``confirm=yes`` (the run page's button with JavaScript off) gets a page that
    asks first."""
    run = get_editable(request.user, Run.objects.select_related("experiment"), pk)
    if not run.is_terminal and request.POST.get("confirm") != CONFIRM_CANCEL:
        context = {
            "run": run,
            "started": run.state not in (Run.State.DRAFT, Run.State.QUEUED),
            "resume_point": resume_point(run),
            "confirm": CONFIRM_CANCEL,
        }
        return render(request, "dashboard/run_confirm_cancel.html", context)
    if run.is_terminal:
        messages.info(request, f"The run is already {run.state}.")
    elif run.state in (Run.State.DRAFT, Run.State.QUEUED) and not run.slurm_job_id:
        services.run_transition(run, Run.State.CANCELLED, failure_reason="cancelled by the user")
        messages.success(request, "Run cancelled.")
    else:
        enqueue_cancel(run)
        messages.success(request, "Cancelling: the job is being stopped.")
    return redirect(run)


@login_required
@require_POST
def run_resubmit(request: HttpRequest, pk: int) -> HttpResponse:
    """Queue a finished run again; it resumes from its last checkpoint, or starts over
    when it has none (the message says which)."""
    run = get_editable(request.user, Run.objects.select_related("experiment"), pk)
    if not run.is_terminal:
        messages.error(request, f"Only a finished run can be resubmitted; this one is {run.state}.")
    else:
        where = resume_point(run)  # before the new job can write a checkpoint
        launch.resubmit(run)
        messages.success(request, f"Resubmitted: {where}.")
    return redirect(run)


@login_required
@require_safe
def run_log(request: HttpRequest, pk: int) -> JsonResponse:
    """The tail of the job's stdout/stderr, for the run page (shown as text, never HTML)."""
    run = get_viewable(request.user, Run.objects.select_related("experiment"), pk)
    text = ""
    if run.run_dir or run.slurm_job_id:
        try:
            text = log_tail(job_spec(run).log_path)
        except JobSpecError:
            text = ""
    return JsonResponse({"run": run.pk, "log": text})


@login_required
@require_POST
def run_annotate(request: HttpRequest, pk: int) -> HttpResponse:
    """The owner's notes and tags on a run (tags: comma-separated names)."""
    run = get_editable(request.user, Run.objects.select_related("experiment__lab"), pk)
    names = [name.strip() for name in request.POST.get("tags", "").split(",") if name.strip()]
    bad = [name for name in names if not TAG_PATTERN.fullmatch(name)]
    if bad:
        messages.error(
            request, f"Not a tag: {bad[0][:48]!r}; use 1-48 letters, digits, '_', '.' or '-'."
        )
        return redirect(run)
    run.notes = request.POST.get("notes", "")[:20_000]
    run.save(update_fields=["notes", "updated_at"])
    run.tags.set(services.tags_resolve(run.experiment.lab, names))
    messages.success(request, "Notes and tags saved.")
    return redirect(run)


@login_required
@require_POST
def run_token(request: HttpRequest, pk: int) -> HttpResponse:
    """Issue (or with ``revoke=1`` revoke) the run's ingestion token; shown once."""
    run = get_editable(request.user, Run.objects.select_related("experiment"), pk)
    if request.POST.get("revoke"):
        services.run_token_revoke(run)
        messages.success(request, "Ingestion token revoked.")
    else:
        # The session carries the token to the next page view only (never the URL).
        request.session[f"run-token-{run.pk}"] = services.run_token_issue(run)
    return redirect(run)
