"""Comparison endpoints: the JSON the compare page plots, and the paper exports.

All take the :class:`webapp.compare.spec.ComparisonSpec` query string. Login required:
the JSON endpoints answer 401 JSON to anonymous users, the file endpoints redirect to
the login page. A run id that is unknown or outside the user's labs gives 404; a bad
parameter 400 JSON ``{"error": message}`` naming it.

- ``GET /api/v1/compare?<spec>`` (``compare:data``): the curves
  (:func:`webapp.compare.serialize.comparison_json`).
- ``GET /api/v1/compare/summary?<spec>&table_metric=M[&lower_is_better=1]``
  (``compare:summary``): the summary table of metric M
  (:func:`webapp.compare.serialize.summary_json`).
- ``GET /compare/export.<pdf|svg|png|csv|zip>?<spec>&columns=1|2`` (``compare:export``):
  the figure, the plotted data, or the figure bundle (its tables: one per metric of the
  spec; ``lower_is_better=1`` applies to all of them).
- ``GET /compare/table.<csv|tex>?<spec>&table_metric=M`` (``compare:table``).
- ``GET /api/v1/compare/saved/<slug or id>`` (``compare:saved_data``): a saved
  comparison's curves, as its page draws them on opening (:func:`saved_data`).
- ``GET /api/v1/compare/bars?<spec>&view=tasks|relative&suite=S&score=accuracy|acc_norm
  &baseline=G`` (``compare:bars``): a bar view (:mod:`webapp.compare.bars`,
  :func:`webapp.compare.serialize.bars_json`); the relative view's metrics are the
  ``metric`` parameters (default val/reward@1).
- ``GET /compare/bars.<pdf|svg|png|csv|tex>?<same>&columns=1|2`` (``compare:bars_file``):
  its figure, its bars as CSV, its LaTeX table (:mod:`webapp.compare.bars_export`).
- ``view=significance`` on both (``&baseline=G&sig_step=S&primary=P|M|G``, the
  ``metric`` parameters): the significance view instead, per metric, policy and group
  the difference to the baseline with its 95% interval (paired t by seed, else Welch), p
  and Holm's p, the primary endpoint (if named) kept out of Holm's family
  (:mod:`webapp.compare.significance`, :func:`webapp.compare.serialize.significance_json`);
  its files are the comparisons as CSV and LaTeX and a forest plot
  (:mod:`webapp.compare.significance_export`).

The files cannot starve the server (issue 44): an export over a cap of
:mod:`webapp.compare.export_limits` (groups, panels, points, bars, forest rows) is 400 JSON
``{"error", "cap", "limit", "count"}`` naming the count, the cap and what to narrow,
checked before the data is built (from the spec and the runs) and again before anything
is drawn (the CSV and LaTeX files cost what the JSON of the same query does, and are
not capped); every figure (pdf, svg, png, and the bundle's) is drawn in a child process
with CPU, memory and wall-clock limits (:mod:`webapp.compare.export_render`), and one
stopped by a limit is 503 JSON ``{"error", "limit"}``.

The table's metric: ``table_metric`` if given, else the *last* ``metric`` parameter
(so ``<spec>&metric=M`` works too), else ``val/reward@1``. Higher is better unless
``lower_is_better=1``, which also makes a run's "best" its lowest value.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from webapp.compare import bars_export, export, export_limits, significance_export
from webapp.compare.assemble import groups_of, policies_of
from webapp.compare.bars import BarOptions
from webapp.compare.export_limits import ExportTooLarge
from webapp.compare.export_render import (
    RenderJob,
    RenderLimitExceeded,
    RenderLimits,
    render_in_child,
)
from webapp.compare.page_spec import page_spec
from webapp.compare.selection import SelectionError, select_runs
from webapp.compare.selectors import (
    bars_build,
    comparison_build,
    runs_for_spec,
    saved_comparison_visible,
    significance_build,
    summary_build,
)
from webapp.compare.serialize import bars_json, comparison_json, significance_json, summary_json
from webapp.compare.significance import Primary
from webapp.compare.spec import (
    DEFAULT_TABLE_METRIC,
    METRIC_PATTERN,
    ComparisonSpec,
    SpecError,
    bool_param,
)
from webapp.core.http import allow_methods, json_error, json_reply, login_required_json
from webapp.runs.models import Run

View = Callable[..., HttpResponse]
EXPORT_FORMATS = ("pdf", "svg", "png", "csv", "zip")
TABLE_FORMATS = ("csv", "tex")
BAR_FORMATS = ("pdf", "svg", "png", "csv", "tex")
CONTENT_TYPES = {
    "pdf": "application/pdf",
    "svg": "image/svg+xml",
    "png": "image/png",
    "csv": "text/csv; charset=utf-8",
    "zip": "application/zip",
    "tex": "application/x-tex; charset=utf-8",
}
SIGNIFICANCE = "significance"


def spec_errors(view: View) -> View:
    """A :class:`SpecError` becomes 400 JSON ``{"error": message}``."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except SpecError as error:
            return json_error(str(error), 400)

    return wrapper


def table_metric(request: HttpRequest) -> str:
    metric = request.GET.get("table_metric", "").strip()
    if not metric:
        metric = next(
            (value.strip() for value in reversed(request.GET.getlist("metric")) if value.strip()),
            DEFAULT_TABLE_METRIC,
        )
    if not METRIC_PATTERN.match(metric):
        raise SpecError(f"table_metric: {metric[:80]!r} is not a metric name")
    return metric


def columns_of(request: HttpRequest) -> int:
    raw = request.GET.get("columns", "").strip() or "1"
    if raw not in ("1", "2"):
        raise SpecError(f"columns: must be 1 or 2, not {raw[:20]!r}")
    return int(raw)


def attachment(body: bytes | str, fmt: str, stem: str) -> HttpResponse:
    response = HttpResponse(body, content_type=CONTENT_TYPES[fmt])
    response["Content-Disposition"] = f'attachment; filename="{stem}.{fmt}"'
    return response


def file_stem(kind: str, spec: ComparisonSpec, extra: str = "") -> str:
    """``comparison-regime-12runs-1a2b3c4d``: readable, and distinct per query."""
    digest = hashlib.sha1((spec.to_query() + extra).encode()).hexdigest()[:8]
    group = re.sub(r"[^A-Za-z0-9_.-]", "-", spec.group_by)
    return f"{kind}-{group}-{len(spec.runs)}runs-{digest}"


# --------------------------------------------------------------------------- JSON


@never_cache
@allow_methods("GET")
@login_required_json
@spec_errors
def data(request: HttpRequest) -> HttpResponse:
    spec = ComparisonSpec.from_query(request.GET)
    runs = runs_for_spec(request.user, spec)
    return json_reply(comparison_json(comparison_build(spec=spec, runs=runs)))


@never_cache
@allow_methods("GET")
@login_required_json
@spec_errors
def summary(request: HttpRequest) -> HttpResponse:
    spec = ComparisonSpec.from_query(request.GET)
    metric = table_metric(request)
    lower = bool_param(request.GET, "lower_is_better")
    runs = runs_for_spec(request.user, spec)
    built = summary_build(spec=spec, runs=runs, metric=metric, lower_is_better=lower)
    return json_reply(summary_json(built))


@never_cache
@allow_methods("GET")
@login_required_json
@spec_errors
def bars(request: HttpRequest) -> HttpResponse:
    spec = ComparisonSpec.from_query(request.GET)
    options = BarOptions.from_query(request.GET, spec)
    runs = runs_for_spec(request.user, spec)
    if options.view == SIGNIFICANCE:
        primary = Primary.from_query(request.GET)
        return json_reply(
            significance_json(
                significance_build(spec=spec, runs=runs, options=options, primary=primary)
            )
        )
    return json_reply(bars_json(bars_build(spec=spec, runs=runs, options=options)))


@never_cache
@allow_methods("GET")
@login_required_json
@spec_errors
def saved_data(request: HttpRequest, ref: str) -> HttpResponse:
    """A saved comparison's curves as its page draws them when opened (the selection
    resolved now, the view settings as the page's form reads them:
    :mod:`webapp.compare.page_spec`): ``{"saved": {"id", "slug", "name", "owner",
    "query", "page"}, "selection": {"description", "runs", "truncated"}, "comparison":
    {...as /api/v1/compare}}``; 404 for a comparison outside the user's labs or one
    that selects no run the user may see."""
    try:
        saved = saved_comparison_visible(request.user, ref)
    except Http404:
        return json_error("no such saved comparison", 404)
    params = QueryDict(saved.query)
    try:
        selection = select_runs(request.user, params)
    except SelectionError as error:
        return json_error(str(error), 400)
    if not selection.runs:
        missing = selection.missing_text
        return json_error(missing or f"No run matches ({selection.description}).", 404)
    spec = page_spec(params, selection.runs)
    comparison = comparison_build(spec=spec, runs=runs_for_spec(request.user, spec))
    return json_reply(
        {
            "saved": {
                "id": saved.pk,
                "slug": saved.slug,
                "name": saved.name,
                "owner": saved.owner.get_username(),
                "query": saved.query,
                "page": request.build_absolute_uri(saved.get_absolute_url()),
            },
            "selection": {
                "description": selection.description,
                "runs": [run.pk for run in selection.runs],
                "truncated": selection.truncated,
            },
            "comparison": comparison_json(comparison),
        }
    )


# --------------------------------------------------------------------------- files


def export_errors(view: View) -> View:
    """The file views' errors as JSON: a :class:`SpecError` 400, an export over a cap
    400 (:class:`ExportTooLarge`: the count, the cap, what to narrow), a figure stopped
    by a limit of its child 503 (:class:`RenderLimitExceeded`)."""

    checked = spec_errors(view)

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return checked(request, *args, **kwargs)
        except ExportTooLarge as error:
            return json_reply(error.as_json(), status=400)
        except RenderLimitExceeded as error:
            return json_reply(error.as_json(), status=503)

    return wrapper


def render_limits() -> RenderLimits:
    """The figure child's limits, from the settings (``MRL_EXPORT_RENDER_*``)."""
    return RenderLimits(
        cpu_seconds=settings.EXPORT_RENDER_CPU_SECONDS,
        memory_mb=settings.EXPORT_RENDER_MEMORY_MB,
        wall_seconds=settings.EXPORT_RENDER_WALL_SECONDS,
    )


def draw(kind: str, figure: Any, formats: tuple[str, ...], columns: int) -> dict[str, bytes]:
    """``figure`` drawn in each of ``formats`` by a limited child process."""
    return render_in_child(RenderJob.of(kind, figure, formats, columns), render_limits())


def planned_policies(runs: list[Run], spec: ComparisonSpec) -> int:
    """How many policies the export will show (the spec's, or the runs' pool's)."""
    return len(policies_of(runs, spec, []))


@login_required
@require_safe
@export_errors
def export_file(request: HttpRequest, fmt: str) -> HttpResponse:
    if fmt not in EXPORT_FORMATS:
        raise Http404(f"no export format {fmt!r}")
    spec = ComparisonSpec.from_query(request.GET)
    columns = columns_of(request)
    runs = runs_for_spec(request.user, spec)
    stem = file_stem("comparison", spec, f"columns={columns}")
    if fmt == "csv":  # the plotted data: what the JSON of the same query costs, uncapped
        return attachment(export.data_csv(comparison_build(spec=spec, runs=runs)), fmt, stem)
    export_limits.check_curves_plan(
        groups=len(groups_of(runs, spec.group_by)),
        metrics=len(spec.metrics),
        policies=planned_policies(runs, spec),
    )
    comparison = comparison_build(spec=spec, runs=runs)
    export_limits.check_curves_built(comparison.panels)
    if fmt == "zip":
        lower = bool_param(request.GET, "lower_is_better")
        summaries = [
            summary_build(spec=spec, runs=runs, metric=metric, lower_is_better=lower)
            for metric in spec.metrics
        ]
        figures = draw("curves", comparison, export.FIGURE_FORMATS, columns)
        body = export.bundle(comparison, summaries, figures, columns)
        return attachment(body, fmt, stem + "-bundle")
    return attachment(draw("curves", comparison, (fmt,), columns)[fmt], fmt, stem)


@login_required
@require_safe
@export_errors
def table_file(request: HttpRequest, fmt: str) -> HttpResponse:
    if fmt not in TABLE_FORMATS:
        raise Http404(f"no table format {fmt!r}")
    spec = ComparisonSpec.from_query(request.GET)
    metric = table_metric(request)
    lower = bool_param(request.GET, "lower_is_better")
    runs = runs_for_spec(request.user, spec)
    built = summary_build(spec=spec, runs=runs, metric=metric, lower_is_better=lower)
    body = export.table_csv([built]) if fmt == "csv" else export.table_latex([built])
    metric_slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", metric).strip("-")
    return attachment(body, fmt, file_stem(f"table-{metric_slug}", spec, metric))


@login_required
@require_safe
@export_errors
def bars_file(request: HttpRequest, fmt: str) -> HttpResponse:
    if fmt not in BAR_FORMATS:
        raise Http404(f"no bar export format {fmt!r}")
    spec = ComparisonSpec.from_query(request.GET)
    options = BarOptions.from_query(request.GET, spec)
    columns = columns_of(request)
    runs = runs_for_spec(request.user, spec)
    extra = "&".join(f"{name}={value}" for name, value in options.query_pairs())
    stem = file_stem(f"bars-{options.view}", spec, f"{extra}&columns={columns}")
    groups = len(groups_of(runs, spec.group_by))
    # The significance view's files, or the bar view's: CSV, LaTeX, figure. A figure is
    # held to its view's caps before the build and again before drawing; the CSV and
    # LaTeX cost what the JSON of the same query costs, uncapped as it is.
    figure = fmt not in ("csv", "tex")
    found: Any
    to_csv: Callable[[Any], str]
    to_tex: Callable[[Any], str]
    if options.view == SIGNIFICANCE:
        if figure:
            export_limits.check_significance_plan(
                groups=groups, metrics=len(options.metrics), policies=planned_policies(runs, spec)
            )
        primary = Primary.from_query(request.GET)
        found = significance_build(spec=spec, runs=runs, options=options, primary=primary)
        if figure:
            export_limits.check_significance_built(found.rows)
        to_csv, to_tex = (
            significance_export.significance_csv,
            significance_export.significance_latex,
        )
    else:
        if figure:
            export_limits.check_bars_plan(groups=groups)
        found = bars_build(spec=spec, runs=runs, options=options)
        if figure:
            export_limits.check_bars_built(found.panels)
        to_csv, to_tex = bars_export.bars_csv, bars_export.bars_latex
    if fmt == "csv":
        return attachment(to_csv(found), fmt, stem)
    if fmt == "tex":
        return attachment(to_tex(found), fmt, stem)
    kind = "significance" if options.view == SIGNIFICANCE else "bars"
    return attachment(draw(kind, found, (fmt,), columns)[fmt], fmt, stem)
