"""Composing experiments (create, edit, clone as a draft).

Thin views: the composer (:mod:`webapp.runs.compose`, over the forms in
``webapp/runs/forms/``) validates, with the step rate measured on the chosen backend
(:func:`webapp.metrics.step_rates.measured_step_rate`) for its wall-time estimate; the
services write.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from scheduler.jobs import placement_json, sbatch_args
from webapp.core import permissions
from webapp.core.digits import INT64_DIGITS, ascii_digits
from webapp.core.models import Lab
from webapp.core.services import lab_for_user
from webapp.metrics.step_rates import measured_step_rate
from webapp.runs import services
from webapp.runs.compose import ExperimentComposer
from webapp.runs.forms import ConfigImportForm, config_problems
from webapp.runs.models import Experiment

SAVE, PREVIEW, IMPORT = "save", "preview", "import"


# --- experiments --------------------------------------------------------------------------
@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def experiment_create(request: HttpRequest) -> HttpResponse:
    """A new experiment; ``?from=<pk>`` starts from a copy of another one (a new draft)."""
    lab = lab_for_user(request.user)  # 403 for someone in no lab
    clone_of = _clone_source(request)
    if request.method == "POST" and request.POST.get("action") == IMPORT:
        return _import(request, lab=lab, experiment=None)
    data = request.POST if request.method == "POST" else None
    composer = ExperimentComposer(
        data,
        lab=clone_of.lab if clone_of else lab,
        clone_of=clone_of,
        step_rate=measured_step_rate,
    )
    if _may_save(request, composer):
        experiment = services.experiment_create(
            owner=request.user,
            lab=clone_of.lab if clone_of else lab,
            cloned_from=clone_of,
            **_save_kwargs(composer),
        )
        messages.success(request, f"Saved experiment {experiment.name}.")
        return redirect(experiment.get_absolute_url())
    return _render_form(request, composer, experiment=None, clone_of=clone_of)


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def experiment_edit(request: HttpRequest, pk: int) -> HttpResponse:
    experiment = permissions.get_editable(request.user, Experiment.objects, pk)
    if request.method == "POST" and request.POST.get("action") == IMPORT:
        return _import(request, lab=experiment.lab, experiment=experiment)
    data = request.POST if request.method == "POST" else None
    composer = ExperimentComposer(
        data, lab=experiment.lab, experiment=experiment, step_rate=measured_step_rate
    )
    if _may_save(request, composer):
        services.experiment_update(experiment, **_save_kwargs(composer))
        messages.success(request, f"Saved experiment {experiment.name}.")
        return redirect(experiment.get_absolute_url())
    return _render_form(request, composer, experiment=experiment, clone_of=None)


def _may_save(request: HttpRequest, composer: ExperimentComposer) -> bool:
    """Whether this request saves: a Save of a valid page whose size warnings, if any,
    were acknowledged ("I have checked these sizes"). A Save refused for the sizes
    re-renders the page with its preview, the warnings and why nothing was saved."""
    if not composer.is_bound or not composer.is_valid():
        return False
    if request.POST.get("action") != SAVE:
        return False
    if composer.sizes_acknowledged():
        return True
    composer.sizes_refused = True
    return False


def _save_kwargs(composer: ExperimentComposer) -> dict[str, Any]:
    """The composer's save arguments (after :meth:`ExperimentComposer.is_valid`), its
    MWRA plan stored with its sbatch arguments (the scheduler's; the experiment page
    shows them)."""
    kwargs = composer.save_kwargs()
    assert composer.plan is not None
    kwargs["resources"]["placement"] = placement_json(composer.plan)
    return kwargs


def _clone_source(request: HttpRequest) -> Experiment | None:
    """The experiment a new draft copies: ``?from=<pk>`` (GET) or the form's cloned_from."""
    raw = request.GET.get("from") or request.POST.get("cloned_from") or ""
    if not raw:
        return None
    experiment_id = ascii_digits(raw, max_digits=INT64_DIGITS)
    if experiment_id is None:
        raise Http404("no such experiment")
    return permissions.get_viewable(request.user, Experiment.objects, experiment_id)


def _import(request: HttpRequest, *, lab: Lab, experiment: Experiment | None) -> HttpResponse:
    """ "Import config JSON": the page filled from a trainer config and checked like a
    preview (nothing is saved); each problem is shown next to the field it names."""
    importer = ConfigImportForm(request.POST, request.FILES)
    if importer.is_valid() and importer.config is not None:
        composer = ExperimentComposer.from_config(importer.config, lab=lab, experiment=experiment)
        composer.is_valid()
        composer.attach_config_errors(config_problems(importer.config))
    else:
        composer = ExperimentComposer(None, lab=lab, experiment=experiment)
    return _render_form(request, composer, experiment=experiment, clone_of=None, importer=importer)


def _render_form(
    request: HttpRequest,
    composer: ExperimentComposer,
    *,
    experiment: Experiment | None,
    clone_of: Experiment | None,
    importer: ConfigImportForm | None = None,
) -> HttpResponse:
    return render(
        request,
        "dashboard/experiment_form.html",
        {
            "composer": composer,
            "experiment": experiment,
            "clone_of": clone_of,
            "previewing": composer.config is not None,
            "sbatch_args": sbatch_args(composer.plan.slurm) if composer.plan else [],
            "importer": importer or ConfigImportForm(),
        },
    )
