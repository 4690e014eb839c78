"""The evaluation-suite registry: list, add, check, edit and delete the lab's suites.

Scoped like the model registry (:mod:`webapp.core.permissions`): a user sees the
suites of their labs, only the owner (or staff) changes one, other labs' ids are 404.
Every page checks the files live (:mod:`webapp.registry.suite_checks`): a file moved
or broken after the suite was saved shows as a problem. A file too large to read in a
request is read by the worker: the view sends each check it asked for.
"""

from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_safe

from scheduler.dispatch import enqueue_file_checks
from trainer.evals.suite import TASK_TYPES
from webapp.core import permissions
from webapp.core.server_files import ReadPolicy, data_policy
from webapp.core.services import lab_for_user
from webapp.registry import services
from webapp.registry.forms import SuiteForm
from webapp.registry.models import EvalSuite
from webapp.registry.permissions import visible_suites
from webapp.registry.suite_checks import TaskCheck, check_suite, new_requests, suite_status

RECENT_EVALUATIONS = 20


@login_required
@require_safe
def suite_list(request: HttpRequest) -> HttpResponse:
    suites = visible_suites(request.user).select_related("owner", "lab")
    rows = []
    policy = data_policy()
    for suite in suites:
        checks = _checked(suite.tasks, policy)
        rows.append(
            {
                "suite": suite,
                "checks": checks,
                "status": suite_status(checks),
                "editable": permissions.can_edit(request.user, suite),
            }
        )
    return render(request, "registry/suite_list.html", {"rows": rows, "task_types": TASK_TYPES})


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def suite_create(request: HttpRequest) -> HttpResponse:
    lab = lab_for_user(request.user)  # 403 for someone in no lab
    form = SuiteForm(request.POST or None, lab=lab)
    if request.method == "POST" and form.is_valid():
        suite = services.eval_suite_create(owner=request.user, lab=lab, **_values(form))
        count = len(suite.tasks)
        added = f"Added suite {suite.name} ({count} task{'' if count == 1 else 's'})."
        messages.success(request, added + _later(form))
        return redirect("registry:suite_list")
    return render(request, "registry/suite_form.html", {"form": form})


@login_required
@require_safe
def suite_detail(request: HttpRequest, pk: int) -> HttpResponse:
    suite = permissions.get_viewable(
        request.user, EvalSuite.objects.select_related("owner", "lab"), pk
    )
    checks = _checked(suite.tasks)
    evaluations = suite.evaluations.select_related("run", "owner")[:RECENT_EVALUATIONS]
    return render(
        request,
        "registry/suite_detail.html",
        {
            "suite": suite,
            "checks": checks,
            "status": suite_status(checks),
            "config_json": json.dumps(suite.config, indent=2),
            "evaluations": evaluations,
            "evaluation_count": suite.evaluations.count(),
            "auto_users": services.eval_suite_auto_users(suite),
            "editable": permissions.can_edit(request.user, suite),
        },
    )


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def suite_edit(request: HttpRequest, pk: int) -> HttpResponse:
    suite = permissions.get_editable(request.user, EvalSuite.objects, pk)
    form = SuiteForm(request.POST or None, lab=suite.lab, instance=suite)
    if request.method == "POST" and form.is_valid():
        services.eval_suite_update(suite, **_values(form))
        messages.success(request, f"Saved suite {suite.name}." + _later(form))
        return redirect(suite.get_absolute_url())
    return render(request, "registry/suite_form.html", {"form": form, "suite": suite})


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def suite_delete(request: HttpRequest, pk: int) -> HttpResponse:
    """GET asks for confirmation (saying who uses the suite); POST deletes."""
    suite = permissions.get_editable(request.user, EvalSuite.objects, pk)
    if request.method == "POST":
        name = suite.name
        services.eval_suite_delete(suite)
        messages.success(request, f"Deleted suite {name}.")
        return redirect("registry:suite_list")
    return render(
        request,
        "registry/suite_confirm_delete.html",
        {
            "suite": suite,
            "auto_users": services.eval_suite_auto_users(suite),
            "evaluation_count": suite.evaluations.count(),
        },
    )


def _checked(tasks: list[dict[str, object]], policy: ReadPolicy | None = None) -> list[TaskCheck]:
    """The suite's file checks; the checks they ask the worker for are sent."""
    checks = check_suite(tasks, policy)
    enqueue_file_checks(new_requests(checks))
    return checks


def _later(form: SuiteForm) -> str:
    """What the save message adds about files the worker still reads (and sends them)."""
    enqueue_file_checks(new_requests(form.checks))
    pending = sum(check.pending for check in form.checks)
    if not pending:
        return ""
    files = "1 file is" if pending == 1 else f"{pending} files are"
    return f" {files} being checked in the background; the suite's page shows the result."


def _values(form: SuiteForm) -> dict[str, object]:
    return {name: form.cleaned_data[name] for name in services.SUITE_FIELDS}
