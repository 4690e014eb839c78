"""CSV downloads of a run's curves, for the run page's "Download CSV" links.

- ``GET /runs/<id>/curves.csv``: every series of the run, ``key,policy,step,value``
  (by key, then policy in pool order, then step);
- ``GET /runs/<id>/metric.csv?key=K``: one metric, ``step,policy,value`` (by step, then
  policy in pool order).

Every point, never downsampled: the points are read by the series API's own reader
(:func:`webapp.metrics.selectors.series_points`) with no point limit, a few series at a time,
and streamed. Non-finite values are written as the API writes them ("NaN", "Infinity",
"-Infinity"); pandas and spreadsheets read those back as numbers. Keys and policy names
come from the run's token: they are written by :class:`webapp.core.csv_safe.SafeWriter`,
so one that a spreadsheet would run as a formula gets a leading "'". Who may download is
who may see the run page: a login, then the run's lab (another lab's run is a 404).
The pool's series (stored under ``_pool``) are written as the page names them: "pool mean"
("pool max" for ``perf/step_s``, the slowest policy's), :func:`trainer.metrics.policy_label`.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Iterator, Sequence

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, StreamingHttpResponse
from django.views.decorators.http import require_safe

from trainer.metrics import POOL, policy_label
from webapp.core.csv_safe import SafeWriter
from webapp.core.http import encode_value
from webapp.core.permissions import get_viewable
from webapp.metrics.models import MetricSeries
from webapp.metrics.selectors import series_of_run, series_points
from webapp.runs.models import Run

ALL_POINTS = 2**31 - 1
"""``max_points`` for :func:`series_points` that no series reaches: no downsampling."""
SERIES_PER_READ = 20
"""Series read per statement while streaming a whole run (bounds the memory held)."""
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def safe_name(text: str, limit: int = 80) -> str:
    """``text`` as a file-name part: runs of anything but ``[A-Za-z0-9_.-]`` become one
    "-", with no dots or dashes at the ends (so never "..", a hidden file or a path)."""
    return _UNSAFE.sub("-", text).strip("-.")[:limit].strip("-.") or "curves"


def _policy_order(run: Run) -> dict[str, int]:
    return {name: i for i, name in enumerate([*run.policy_names, POOL])}


def _sorted_series(run: Run, series: Iterable[MetricSeries]) -> list[MetricSeries]:
    """By key, then policy in pool order (policies not in the pool last, by name)."""
    order = _policy_order(run)
    return sorted(series, key=lambda s: (s.key, order.get(s.policy, len(order)), s.policy))


def _csv_lines(header: Sequence[str], rows: Iterable[Sequence[object]]) -> Iterator[str]:
    """The CSV text of ``header`` and ``rows``, a few hundred rows per chunk."""
    buffer = io.StringIO()
    writer = SafeWriter(buffer)
    writer.writerow(header)
    for i, row in enumerate(rows, 1):
        writer.writerow(row)
        if i % 500 == 0:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


def _cell(value: float) -> str:
    """A value as CSV text: ``repr`` (shortest exact form) or the API's NaN/Infinity."""
    encoded = encode_value(value)
    return encoded if isinstance(encoded, str) else repr(encoded)


def _attachment(lines: Iterator[str], filename: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(lines, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "no-store"
    return response


def _viewable_run(request: HttpRequest, pk: int) -> Run:
    return get_viewable(request.user, Run.objects.select_related("experiment"), pk)


def _run_rows(series: Sequence[MetricSeries]) -> Iterator[tuple[str, str, int, str]]:
    for start in range(0, len(series), SERIES_PER_READ):
        chunk = series[start : start + SERIES_PER_READ]
        found = series_points([s.pk for s in chunk], max_points=ALL_POINTS)
        for s in chunk:
            for step, value in found[s.pk].points:
                yield s.key, policy_label(s.policy, s.key), step, _cell(value)


@login_required
@require_safe
def run_curves_csv(request: HttpRequest, pk: int) -> StreamingHttpResponse:
    """Every point of every series of the run: ``key,policy,step,value``."""
    run = _viewable_run(request, pk)
    series = _sorted_series(run, series_of_run(run))
    filename = f"run-{run.pk}-{safe_name(run.name)}.csv"
    return _attachment(_csv_lines(("key", "policy", "step", "value"), _run_rows(series)), filename)


@login_required
@require_safe
def run_metric_csv(request: HttpRequest, pk: int) -> StreamingHttpResponse:
    """Every point of one metric (``?key=K``), all policies: ``step,policy,value``; 404
    for a key the run has no series of."""
    run = _viewable_run(request, pk)
    key = request.GET.get("key", "")
    series = _sorted_series(run, series_of_run(run, keys=[key])) if key else []
    if not series:
        raise Http404("the run has no such metric")
    found = series_points([s.pk for s in series], max_points=ALL_POINTS)
    rows = sorted(
        (
            (step, i, s.policy, value)
            for i, s in enumerate(series)
            for step, value in found[s.pk].points
        ),
        key=lambda row: row[:2],
    )
    lines = _csv_lines(
        ("step", "policy", "value"),
        ((step, policy_label(p, key), _cell(v)) for step, _, p, v in rows),
    )
    return _attachment(lines, f"run-{run.pk}-{safe_name(key)}.csv")
