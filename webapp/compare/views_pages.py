"""Sweeps and the compare page (the data and exports come from ``webapp.compare``)."""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from scheduler.launch import sweep_launch
from trainer import metrics as m
from trainer.config import ConfigError
from trainer.tasks.addition_slices import SLICES
from webapp.compare.bars import SCORE_LABELS, VIEW_TITLES, eval_suites
from webapp.compare.models import SavedComparison
from webapp.compare.page_spec import (
    BAND_CHOICES,
    X_CHOICES,
    chosen_metrics,
    metric_keys,
    pool_policies,
)
from webapp.compare.selection import FILTERS, SelectionError, select_runs, view_query
from webapp.compare.spec import DEFAULT_TABLE_METRIC, SpecError, bool_param
from webapp.core.permissions import get_viewable, lab_ids
from webapp.core.selectors import worker_status
from webapp.core.services import lab_for_user
from webapp.metrics.run_columns import with_list_columns
from webapp.metrics.step_rates import measured_step_rate
from webapp.runs import services
from webapp.runs.compose_sizes import ACKNOWLEDGE_LABEL, SweepSize
from webapp.runs.models import Experiment, Sweep
from webapp.runs.sweep_forms import SweepForm


def _per_skill(skills: tuple[str, ...]) -> list[str]:
    """The per-skill validation keys (trainer/policy.py): ``val/reward@1/<skill>``."""
    return [f"{m.VAL_REWARD_AT_1}/{skill}" for skill in skills]


DISCRIMINATION = "val/discrimination"
"""``val/discrimination/<slice>``: reward@1 on the slice + reward@1 on no_carry - 1 (the
trainer logs it; 0 for a policy that answers every prompt alike)."""
GAP_ERRORS = (
    "val/error/correct/carry",
    "val/error/spurious_carry/no_carry",
    "val/error/dropped_carry/carry",
    "val/error/wrong_digit_count/overflow",
)
"""The error kinds the gap-errors preset draws (``val/error/<kind>/<slice>``)."""


def _discrimination(slices: tuple[str, ...]) -> list[str]:
    """The discrimination keys of ``slices``: ``val/discrimination/<slice>``."""
    return [f"{DISCRIMINATION}/{name}" for name in slices]


# The paper's standard figures, as view settings (the selection stays the user's).
PRESETS: dict[str, dict[str, Any]] = {
    "fig4": {
        "title": "Figure 4: val reward@1 and training reward per policy",
        "params": {"metric": [m.VAL_REWARD_AT_1, m.TRAIN_REWARD_MEAN], "group_by": "regime"},
    },
    "fig5": {
        "title": "Figure 5: entropy, KL coefficient and KL loss",
        "params": {
            "metric": [m.ENTROPY, m.KL_COEF, m.KL_LOSS],
            "group_by": "regime",
        },
    },
    "remix": {
        "title": "ReMix: rollouts vs accuracy",
        "params": {"metric": [m.VAL_REWARD_AT_1], "group_by": "off_policy", "x": "rollouts"},
    },
    # The bar views (webapp/compare/bars.py): the final checkpoints' evaluation per task,
    # and the final validation reward relative to the standalone runs.
    "fig12": {
        "title": "Figure 12: evaluation per task",
        "params": {"view": "tasks", "group_by": "regime"},
    },
    "fig11": {
        "title": "Figure 11: relative improvement over standalone",
        "params": {
            "view": "relative",
            "metric": [m.VAL_REWARD_AT_1],
            "group_by": "regime",
            "baseline": "standalone",
        },
    },
    # The complementary-skills pool (examples/complementary.json, issue 18): each policy
    # starts on one skill; a regime that transfers lifts its foreign skills.
    "complementary": {
        "title": "Complementary skills: validation reward@1 per skill",
        "params": {
            "metric": _per_skill(("addition", "subtraction", "multiplication")),
            "group_by": "regime",
        },
    },
    # The systematic-gap pool (examples/gap.json, issue 30): each weak policy fails every
    # sample on its gap slice; a regime that transfers lifts it.
    "gap": {
        "title": "Systematic gap: validation reward@1 per slice",
        "params": {
            "metric": _per_skill(SLICES),
            "group_by": "regime",
        },
    },
    # The gap pool's net effect and discrimination against standalone (issue 45), paired by
    # seed as bench/regimes.py computes them: the carry discrimination (reward@1 on carry +
    # on no_carry - 1) of qwen-nocarry under sgt is the primary endpoint, outside the Holm
    # family of the other rows; val/reward@1 gives every policy's and the pool mean's net
    # effect. The view's own title names the tests it used.
    "gap-significance": {
        "title": "Systematic gap: net effect and discrimination against standalone",
        "params": {
            "view": "significance",
            "metric": [
                *_discrimination(("carry", "overflow")),
                *_per_skill(("carry", "no_carry")),
                m.VAL_REWARD_AT_1,
            ],
            "group_by": "regime",
            "baseline": "standalone",
            "primary": f"qwen-nocarry|{DISCRIMINATION}/carry|sgt",
        },
    },
    # How each policy errs on its slices (trainer/tasks/addition_errors.py): right answers
    # on carry, spurious carries on no_carry, dropped carries, a wrong digit count.
    "gap-errors": {
        "title": "Systematic gap: kinds of error per slice",
        # The two weak policies: the strong one makes no errors to draw.
        "params": {
            "metric": list(GAP_ERRORS),
            "policy": ["qwen-nocarry", "gpt2-nohundreds"],
            "group_by": "regime",
        },
    },
}
GROUP_BY_CHOICES = ("regime", "off_policy", "experiment", "seed")


# --- sweeps ----------------------------------------------------------------------------
@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def sweep_create(request: HttpRequest, pk: int) -> HttpResponse:
    """A grid over experiment ``pk``'s pool; any lab member may sweep (they own it)."""
    source = get_viewable(request.user, Experiment.objects.all(), pk)
    form = SweepForm(
        request.POST or None,
        initial={"name": f"{source.name}-sweep"[:48]},
        source_config=source.config,
    )
    resources = dict(source.resources or {})
    resources.setdefault("backend", settings.EXECUTOR)
    at_once = settings.LOCAL_MAX_JOBS if resources["backend"] == "local" else None
    size = None
    if request.method == "POST" and form.is_valid():
        size = form.size(source.config, resources, at_once, measured_step_rate)
    if size is not None and (
        not size.warnings or request.POST.get(SIZES_CHECKED_FIELD) == size.digest
    ):
        data = form.cleaned_data
        try:
            sweep = sweep_launch(
                owner=request.user,
                source=source,
                name=data["name"],
                regimes=data["regimes"],
                seeds=data["seeds"],
                param_path=data["param_path"],
                param_values=data["param_values"],
                description=data["description"],
            )
        except services.SweepError as error:
            form.add_error(error.field, str(error))
        except ConfigError as error:
            for path, message in error.errors.items():
                swept = bool(data["param_path"]) and path == data["param_path"]
                form.add_error("param_values" if swept else None, f"{path}: {message}")
        else:
            count = sum(len(data["seeds"]) for _ in sweep.experiments.all())
            message = f"Sweep {sweep.name} launched: {count} runs queued."
            notice = worker_status().notice("the runs will start when a worker is back")
            messages.success(request, f"{message} {notice}." if notice else message)
            return redirect(sweep)
    runs, regimes, seeds, values = form.run_count()
    checked = request.POST.get(SIZES_CHECKED_FIELD, "")
    context = {
        "form": form,
        "source": source,
        "count": {"runs": runs, "regimes": regimes, "seeds": seeds, "values": values},
        "local_max_jobs": at_once,
        "size": size,
        "sizes_checked_field": SIZES_CHECKED_FIELD,
        "acknowledge_label": ACKNOWLEDGE_LABEL,
        # Launch pressed on sizes to check: unticked, or ticked for other sizes.
        "sizes_refusal": _sweep_sizes_refusal(size, checked),
    }
    return render(request, "compare/sweep_form.html", context)


SIZES_CHECKED_FIELD = "sizes_checked"


def _sweep_sizes_refusal(size: SweepSize | None, checked: str) -> str:
    """Why Launch did nothing on a valid sweep with sizes to check ("" otherwise)."""
    if size is None or not size.warnings or checked == size.digest:
        return ""
    if checked:
        return (
            "Nothing was launched: the sizes changed since you ticked "
            f"\u201c{ACKNOWLEDGE_LABEL}\u201d; check them again."
        )
    return f"Nothing was launched yet: tick \u201c{ACKNOWLEDGE_LABEL}\u201d to launch."


@login_required
@require_safe
def sweep_detail(request: HttpRequest, pk: int) -> HttpResponse:
    sweep = get_viewable_sweep(request, pk)
    experiments = list(sweep.experiments.prefetch_related("runs").order_by("id"))
    # Progress and val/reward@1 on the prefetched runs the template walks (one query).
    with_list_columns(run for experiment in experiments for run in experiment.runs.all())
    compare_url = f"{reverse('compare:page')}?sweep={sweep.pk}&group_by=" + (
        "regime" if not sweep.param_path else "experiment"
    )
    context = {
        "sweep": sweep,
        "experiments": experiments,
        "compare_url": compare_url,
        "worker": worker_status(),
    }
    return render(request, "compare/sweep_detail.html", context)


@login_required
@require_safe
def sweep_list(request: HttpRequest) -> HttpResponse:
    sweeps = Sweep.objects.filter(lab_id__in=lab_ids(request.user)).select_related("owner")
    return render(request, "compare/sweep_list.html", {"sweeps": sweeps[:200]})


def get_viewable_sweep(request: HttpRequest, pk: int) -> Sweep:
    sweep = Sweep.objects.select_related("owner").filter(pk=pk).first()
    if sweep is None or sweep.lab_id not in lab_ids(request.user):
        raise Http404("no such sweep")
    return sweep


# --- the compare page --------------------------------------------------------------------
def _compare_page(
    request: HttpRequest, params: QueryDict, saved: SavedComparison | None
) -> HttpResponse:
    try:
        selection = select_runs(request.user, params)
        log_y = bool_param(params, "log_y")  # "0" is a string, but no log scale
    except (SelectionError, SpecError) as error:
        return render(
            request, "compare/compare.html", {"error": str(error), "saved": saved}, status=400
        )
    if not selection.runs:
        # Nothing to compare: say why instead of drawing empty cards ("Loading..." forever).
        # An id that is unknown or not visible reads the same, and is a 404.
        missing = selection.missing_text
        error = missing or f"No run matches this selection ({selection.description})."
        context = {"error": error, "saved": saved}
        return render(request, "compare/compare.html", context, status=404 if missing else 200)
    runs = selection.runs
    run_ids = [run.pk for run in runs]
    keys = metric_keys(runs)
    policies = pool_policies(runs)
    settings_query = view_query(params)
    selection_query = params.copy()
    for key in list(settings_query):
        selection_query.pop(key, None)
    context = {
        "saved": saved,
        "selection": selection,
        "run_ids": ",".join(str(pk) for pk in run_ids),
        "selection_query": selection_query,
        "keys": keys,
        "policies": policies,
        "chosen_metrics": chosen_metrics(params),
        "summary_metric": DEFAULT_TABLE_METRIC,
        "chosen_policies": params.getlist("policy"),
        "params": params,
        "log_y": log_y,
        "presets": PRESETS,
        "group_by_choices": GROUP_BY_CHOICES,
        "x_choices": X_CHOICES,
        "band_choices": BAND_CHOICES,
        "filters": FILTERS,
        "view_choices": VIEW_TITLES,
        "suites": list(eval_suites(keys)),
        "score_choices": SCORE_LABELS,
        "page_config": {
            "runs": run_ids,
            "urls": {
                "data": reverse("compare:data"),
                "summary": reverse("compare:summary"),
                "export": reverse("compare:export", args=["FMT"]),
                "table": reverse("compare:table", args=["FMT"]),
                "bars": reverse("compare:bars"),
                "bars_file": reverse("compare:bars_file", args=["FMT"]),
            },
        },
    }
    return render(request, "compare/compare.html", context)


@login_required
@require_safe
def compare(request: HttpRequest) -> HttpResponse:
    params = request.GET.copy()
    preset = PRESETS.get(params.get("preset", ""))
    if preset is not None:
        params.pop("preset")
        for key, value in preset["params"].items():
            params.setlist(key, value if isinstance(value, list) else [value])
    return _compare_page(request, params, saved=None)


@login_required
@require_POST
def comparison_save(request: HttpRequest) -> HttpResponse:
    name = request.POST.get("name", "").strip()[:100]
    query = request.POST.get("query", "")[:4000]
    if "\x00" in name or "\x00" in query:
        messages.error(request, "A comparison's name and query cannot contain NUL characters.")
        return redirect(reverse("compare:page"))
    if not name:
        messages.error(request, "Give the comparison a name to save it.")
        return redirect(f"{reverse('compare:page')}?{query}")
    try:
        select_runs(request.user, QueryDict(query))
        lab = lab_for_user(request.user)
    except (SelectionError, ValidationError) as error:
        messages.error(request, str(error))
        return redirect(reverse("compare:page"))
    saved = SavedComparison.objects.create(
        lab=lab, owner=request.user, name=name, query=query, slug=secrets.token_urlsafe(9)
    )
    messages.success(request, "Saved: this comparison's address is stable; share it with the lab.")
    return redirect(saved)


@login_required
@require_safe
def comparison_saved(request: HttpRequest, slug: str) -> HttpResponse:
    saved = SavedComparison.objects.filter(slug=slug, lab_id__in=lab_ids(request.user)).first()
    if saved is None:
        raise Http404("no such comparison")
    return _compare_page(request, QueryDict(saved.query), saved=saved)


@login_required
@require_safe
def comparison_list(request: HttpRequest) -> HttpResponse:
    saved = SavedComparison.objects.filter(lab_id__in=lab_ids(request.user)).select_related("owner")
    return render(request, "compare/comparison_list.html", {"comparisons": saved[:200]})
