"""What the compare page asks for when it opens: the checkboxes it offers and ticks, and
the comparison spec its script requests (``static/js/compare-page.js``'s ``viewParams``),
so that code reading a saved comparison (``GET /api/v1/compare/saved/<ref>``) gets the
numbers the page draws.

The page's form starts from the query (a saved comparison's, or the address bar's): the
metric checkboxes are the selected runs' keys, sorted, ticked when the query names them
(or, when it names none, the defaults :data:`webapp.compare.spec.DEFAULT_METRICS`); the
policy checkboxes are the runs' policies in pool order (then "pool mean" where a run
logged one), ticked when named; ``group_by`` (default ``regime``), ``smooth`` (default
0) are text fields; ``x`` and ``band`` are selects that fall back to their first option
(``step``, ``std``) on a value they lack; ``log_y`` is ticked by any non-empty value.
The script sends the selection as the resolved run ids, the ticked boxes in the form's
order, and the fields' values.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.http import QueryDict

from trainer import metrics as m
from webapp.compare.spec import DEFAULT_METRICS, ComparisonSpec
from webapp.metrics.models import MetricSeries
from webapp.runs.models import Run

X_CHOICES: tuple[tuple[str, str], ...] = (
    ("step", "step"),
    ("rollouts", "rollouts"),
    ("tokens", "response tokens"),
    ("wall_time", "wall time"),
)
BAND_CHOICES: tuple[tuple[str, str], ...] = (
    ("std", "± std"),
    ("minmax", "min-max"),
    ("ci95", "95% CI"),
    ("none", "none"),
)


def metric_keys(runs: Sequence[Run]) -> list[str]:
    """Every metric key of ``runs``, sorted: the page's metric checkboxes."""
    return sorted(
        MetricSeries.objects.filter(run_id__in=[run.pk for run in runs])
        .values_list("key", flat=True)
        .distinct()
    )


def pool_policies(runs: Sequence[Run]) -> list[str]:
    """The runs' policies, the first run's pool order first, then the pool mean
    (``_pool``) when some run logged one (val/reward@1, train/reward_mean): the page's
    policy boxes."""
    names: list[str] = []
    for run in runs:
        names += [name for name in run.policy_names if name not in names]
    if has_pool_mean(runs):
        names.append(m.POOL)
    return names


def has_pool_mean(runs: Sequence[Run]) -> bool:
    """Whether some of ``runs`` logged a pool-mean series (:data:`trainer.metrics.POOL`
    under a key its pool value is the mean of), one query."""
    keys = [key for key, how in m.POOL_REDUCTIONS.items() if how == "mean"]
    return MetricSeries.objects.filter(
        run_id__in=[run.pk for run in runs], policy=m.POOL, key__in=keys
    ).exists()


def chosen_metrics(params: QueryDict) -> list[str]:
    """The metrics the query names, else the defaults: which metric boxes are ticked."""
    return params.getlist("metric") or list(DEFAULT_METRICS)


def _select(params: QueryDict, name: str, choices: tuple[tuple[str, str], ...]) -> str:
    value = params.get(name, "")
    return value if value in {option for option, _ in choices} else choices[0][0]


def page_query(
    params: QueryDict, runs: Sequence[Run], keys: Sequence[str], policies: Sequence[str]
) -> QueryDict:
    """The query the page's script sends for its curves on opening (``viewParams``), for
    ``runs`` (the selection, resolved) offered ``keys`` and ``policies``."""
    query = QueryDict(mutable=True)
    query["runs"] = ",".join(str(run.pk) for run in runs)
    group_by = params.get("group_by", "") or "regime"
    query["group_by"] = group_by
    query["x"] = _select(params, "x", X_CHOICES)
    query["band"] = _select(params, "band", BAND_CHOICES)
    smooth = params.get("smooth", "") or "0"
    query["smooth"] = smooth
    if params.get("log_y", ""):
        query["log_y"] = "1"
    ticked_metrics = set(chosen_metrics(params))
    query.setlist("metric", [key for key in keys if key in ticked_metrics])
    ticked_policies = set(params.getlist("policy"))
    query.setlist("policy", [name for name in policies if name in ticked_policies])
    return query


def page_spec(params: QueryDict, runs: Sequence[Run]) -> ComparisonSpec:
    """The spec of the curves the page draws for ``params`` over ``runs`` (the selection,
    resolved); :class:`webapp.compare.spec.SpecError` as the data endpoint would answer."""
    query = page_query(params, runs, metric_keys(runs), pool_policies(runs))
    return ComparisonSpec.from_query(query)
