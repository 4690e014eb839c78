"""The evaluation-suite registry: list, add, check, edit and delete the lab's suites.

Scoped like the model registry (:mod:`webapp.experiments.permissions`): a user sees the
suites of their labs, only the owner (or staff) changes one, other labs' ids are 404.
Every page checks the files live (:mod:`webapp.experiments.suite_checks`): a file moved
or broken after the suite was saved shows as a problem.
"""

from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from trainer.evals.suite import TASK_TYPES
from webapp.experiments import compose_services, permissions, services
from webapp.experiments.forms import SuiteForm
from webapp.experiments.models import EvalSuite
from webapp.experiments.suite_checks import check_suite, suite_status

RECENT_EVALUATIONS = 20


@login_required
@require_GET
def suite_list(request: HttpRequest) -> HttpResponse:
    suites = permissions.visible_suites(request.user).select_related("owner", "lab")
    rows = []
    for suite in suites:
        checks = check_suite(suite.tasks)
        rows.append(
            {
                "suite": suite,
                "checks": checks,
                "status": suite_status(checks),
                "editable": permissions.can_edit(request.user, suite),
            }
        )
    return render(request, "experiments/suite_list.html", {"rows": rows, "task_types": TASK_TYPES})


@login_required
@require_http_methods(["GET", "POST"])
def suite_create(request: HttpRequest) -> HttpResponse:
    lab = services.lab_for_user(request.user)  # 403 for someone in no lab
    form = SuiteForm(request.POST or None, lab=lab)
    if request.method == "POST" and form.is_valid():
        suite = compose_services.eval_suite_create(owner=request.user, lab=lab, **_values(form))
        messages.success(request, f"Added suite {suite.name} ({len(suite.tasks)} tasks).")
        return redirect("experiments:suite_list")
    return render(request, "experiments/suite_form.html", {"form": form})


@login_required
@require_GET
def suite_detail(request: HttpRequest, pk: int) -> HttpResponse:
    suite = permissions.get_viewable(
        request.user, EvalSuite.objects.select_related("owner", "lab"), pk
    )
    checks = check_suite(suite.tasks)
    evaluations = suite.evaluations.select_related("run", "owner")[:RECENT_EVALUATIONS]
    return render(
        request,
        "experiments/suite_detail.html",
        {
            "suite": suite,
            "checks": checks,
            "status": suite_status(checks),
            "config_json": json.dumps(suite.config, indent=2),
            "evaluations": evaluations,
            "evaluation_count": suite.evaluations.count(),
            "auto_users": compose_services.eval_suite_auto_users(suite),
            "editable": permissions.can_edit(request.user, suite),
        },
    )


@login_required
@require_http_methods(["GET", "POST"])
def suite_edit(request: HttpRequest, pk: int) -> HttpResponse:
    suite = permissions.get_editable(request.user, EvalSuite.objects, pk)
    form = SuiteForm(request.POST or None, lab=suite.lab, instance=suite)
    if request.method == "POST" and form.is_valid():
        compose_services.eval_suite_update(suite, **_values(form))
        messages.success(request, f"Saved suite {suite.name}.")
        return redirect(suite.get_absolute_url())
    return render(request, "experiments/suite_form.html", {"form": form, "suite": suite})


@login_required
@require_http_methods(["GET", "POST"])
def suite_delete(request: HttpRequest, pk: int) -> HttpResponse:
    """GET asks for confirmation (saying who uses the suite); POST deletes."""
    suite = permissions.get_editable(request.user, EvalSuite.objects, pk)
    if request.method == "POST":
        name = suite.name
        compose_services.eval_suite_delete(suite)
        messages.success(request, f"Deleted suite {name}.")
        return redirect("experiments:suite_list")
    return render(
        request,
        "experiments/suite_confirm_delete.html",
        {
            "suite": suite,
            "auto_users": compose_services.eval_suite_auto_users(suite),
            "evaluation_count": suite.evaluations.count(),
        },
    )


def _values(form: SuiteForm) -> dict[str, object]:
    return {name: form.cleaned_data[name] for name in compose_services.SUITE_FIELDS}
