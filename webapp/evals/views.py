"""A run's evaluations: launch one from the run page, follow and cancel its job, and the
JSON the page's evaluation panel polls (jobs + the per-task results table)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST, require_safe

from scheduler import evaluations as jobs
from scheduler.backends import log_tail
from scheduler.jobs import JobSpecError
from webapp.core.digits import INT64_DIGITS, ascii_digits
from webapp.core.permissions import can_edit, get_editable, get_viewable
from webapp.evals.evaluations import checkpoint_steps, results_json, results_table, steps_label
from webapp.evals.forms import EvaluateForm
from webapp.evals.models import Evaluation
from webapp.registry.models import EvalSuite
from webapp.runs import services
from webapp.runs.models import Experiment, Run

PANEL = "#evaluation"


@login_required
@require_POST
def run_evaluate(request: HttpRequest, pk: int) -> HttpResponse:
    """Queue an evaluation of the run (the "Evaluate" form); its job starts on the run's
    backend. A problem is shown on the run page; nothing is queued then."""
    run = get_editable(request.user, Run.objects.select_related("experiment"), pk)
    form = EvaluateForm(request.POST, run=run, steps=checkpoint_steps(run))
    back = redirect(reverse("dashboard:run_detail", args=[run.pk]) + PANEL)
    if not run.run_dir:
        messages.error(request, "The run has not started yet: there is nothing to evaluate.")
        return back
    if not form.is_valid():
        errors = [str(error) for errors in form.errors.values() for error in errors]
        messages.error(request, "Not evaluated: " + " ".join(errors))
        return back
    data = form.cleaned_data
    evaluation = jobs.queue(
        run,
        data["suite"],
        owner=request.user,
        steps=data["steps"],
        include_base=data["include_base"],
    )
    messages.success(request, f"Evaluating on {evaluation.suite_name} ({steps_label(evaluation)}).")
    return back


@never_cache
@login_required
@require_safe
def run_evaluations(request: HttpRequest, pk: int) -> JsonResponse:
    """The panel's data: the run's evaluation jobs (newest first) and results per suite."""
    run = get_viewable(request.user, Run.objects.select_related("experiment"), pk)
    editable = can_edit(request.user, run)
    rows = []
    for evaluation in run.evaluations.select_related("owner")[:50]:
        evaluation.run = run
        rows.append(
            {
                "id": evaluation.pk,
                "suite": evaluation.suite_name,
                "what": steps_label(evaluation),
                "state": evaluation.state,
                "automatic": evaluation.automatic,
                "owner": evaluation.owner.get_username(),
                "backend": evaluation.backend,
                "job_id": evaluation.job_id,
                "node": evaluation.node,
                "failure_reason": evaluation.failure_reason,
                "created_at": evaluation.created_at.isoformat(),
                "finished_at": evaluation.finished_at.isoformat()
                if evaluation.finished_at
                else None,
                "log_url": reverse("evals:evaluation_log", args=[evaluation.pk]),
                "cancel_url": reverse("evals:evaluation_cancel", args=[evaluation.pk])
                if editable or can_edit(request.user, evaluation)
                else None,
            }
        )
    return JsonResponse({"evaluations": rows, "results": results_json(results_table(run))})


@login_required
@require_POST
def experiment_auto_eval(request: HttpRequest, pk: int) -> HttpResponse:
    """Set (or clear, with an empty ``suite``) the suite each run of the experiment is
    evaluated on when it completes."""
    experiment = get_editable(request.user, Experiment.objects, pk)
    chosen = request.POST.get("suite", "").strip()
    suite = None
    if chosen:
        suite_id = ascii_digits(chosen, max_digits=INT64_DIGITS)
        suite = (
            EvalSuite.objects.filter(lab=experiment.lab_id, pk=suite_id).first()
            if suite_id is not None
            else None
        )
        if suite is None:
            messages.error(request, "No such suite in the experiment's lab.")
            return redirect(experiment)
    services.experiment_auto_eval_set(experiment, suite)
    if suite is None:
        messages.success(request, "Runs of this experiment are no longer evaluated automatically.")
    else:
        messages.success(
            request, f"Each run is evaluated on {suite.name} when it completes (base + final)."
        )
    return redirect(experiment)


@login_required
@require_POST
def evaluation_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    """Stop an evaluation (its launcher, the run's owner, or staff)."""
    evaluation = get_viewable(
        request.user, Evaluation.objects.select_related("run__experiment"), pk
    )
    if not (can_edit(request.user, evaluation) or can_edit(request.user, evaluation.run)):
        raise PermissionDenied("only who launched it, the run's owner or staff can cancel it")
    messages.success(request, jobs.request_cancel(evaluation))
    return redirect(reverse("dashboard:run_detail", args=[evaluation.run_id]) + PANEL)


@never_cache
@login_required
@require_safe
def evaluation_log(request: HttpRequest, pk: int) -> JsonResponse:
    """The tail of the evaluation job's output (shown as text, never HTML)."""
    evaluation = get_viewable(
        request.user, Evaluation.objects.select_related("run__experiment"), pk
    )
    text = ""
    if evaluation.run.run_dir:
        try:
            text = log_tail(jobs.eval_job_spec(evaluation).log_path)
        except JobSpecError:
            text = ""
    return JsonResponse({"evaluation": evaluation.pk, "log": text})
