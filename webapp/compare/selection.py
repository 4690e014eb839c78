"""Which runs a comparison shows: a sweep, a list of runs, or a saved filter.

The compare page's query string carries the selection next to the view settings:

- ``sweep=<id>``: every run of the sweep;
- ``runs=1,2,3`` (or ``run=1&run=2``, what the runs list's checkboxes send): those runs;
- ``q_regime``, ``q_off_policy``, ``q_pool``, ``q_tag``, ``q_owner``, ``q_experiment``,
  ``q_state``: a filter over the lab's runs, evaluated each time the page opens (a saved
  "all SGT runs on pool X" picks up new runs). ``q_pool`` is the pool's policy names,
  comma-separated, in any order.

Only runs the user may see are ever selected. A run id or sweep that is unknown, or not
the user's to see, is named in :attr:`Selection.missing_text` (the two look the same, so
that an id does not tell an outsider whether the run exists).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.http import QueryDict

from webapp.core.digits import INT64_DIGITS, ascii_digits
from webapp.runs.models import Run
from webapp.runs.permissions import visible_runs

MAX_RUNS = 200
FILTERS = ("q_regime", "q_off_policy", "q_pool", "q_tag", "q_owner", "q_experiment", "q_state")
SELECTION_KEYS = ("sweep", "runs", "run", *FILTERS)


class SelectionError(ValueError):
    """A selection parameter that makes no sense (the message names it)."""


@dataclass(frozen=True)
class Selection:
    runs: list[Run]
    description: str
    truncated: bool = False
    missing_runs: tuple[int, ...] = ()  # asked for by id, unknown or not visible
    missing_sweep: int | None = None  # the sweep asked for, unknown or not visible

    @property
    def missing_text(self) -> str:
        """ "Run 99999 does not exist or is not visible to you." (runs, or the sweep), or
        "" when every id asked for was found."""
        if self.missing_sweep is not None:
            return f"Sweep {self.missing_sweep} does not exist or is not visible to you."
        if not self.missing_runs:
            return ""
        shown = ", ".join(str(pk) for pk in self.missing_runs[:10])
        if len(self.missing_runs) > 10:
            shown += f" and {len(self.missing_runs) - 10} more"
        if len(self.missing_runs) == 1:
            return f"Run {shown} does not exist or is not visible to you."
        return f"Runs {shown} do not exist or are not visible to you."


def _int_list(text: str, name: str) -> list[int]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    ids = [ascii_digits(item, max_digits=INT64_DIGITS) for item in items]
    if None in ids:
        raise SelectionError(f"{name}: expected comma-separated run ids, got {text[:80]!r}")
    return [run_id for run_id in ids if run_id is not None]


def select_runs(user: AbstractBaseUser | AnonymousUser, params: QueryDict) -> Selection:
    for key in SELECTION_KEYS:
        if any("\x00" in value for value in params.getlist(key)):
            raise SelectionError(f"{key}: must not contain NUL characters")
    queryset = visible_runs(user).select_related("experiment", "experiment__owner")
    ids: list[int] = []
    sweep_id: int | None = None
    if params.get("sweep"):
        sweep_id = ascii_digits(params["sweep"].strip(), max_digits=INT64_DIGITS)
        if sweep_id is None:
            raise SelectionError(f"sweep: not an id: {params['sweep'][:40]!r}")
        queryset = queryset.filter(experiment__sweep_id=sweep_id)
        description = f"sweep #{sweep_id}"
    elif params.get("runs") or params.getlist("run"):
        ids = _int_list(",".join([params.get("runs", ""), *params.getlist("run")]), "runs")
        queryset = queryset.filter(pk__in=ids)
        description = f"Chosen by id ({len(ids)} asked for)"
    else:
        parts = []
        if params.get("q_regime"):
            queryset = queryset.filter(regime=params["q_regime"])
            parts.append(f"regime {params['q_regime']}")
        if params.get("q_off_policy"):
            queryset = queryset.filter(off_policy=params["q_off_policy"])
            parts.append(f"off-policy {params['q_off_policy']}")
        if params.get("q_tag"):
            tag = params["q_tag"]
            queryset = queryset.filter(tags__name=tag) | queryset.filter(experiment__tags__name=tag)
            parts.append(f"tag {tag}")
        if params.get("q_owner"):
            queryset = queryset.filter(experiment__owner__username=params["q_owner"])
            parts.append(f"owner {params['q_owner']}")
        if params.get("q_experiment"):
            queryset = queryset.filter(experiment__name__icontains=params["q_experiment"])
            parts.append(f"experiment ~ {params['q_experiment']}")
        if params.get("q_state"):
            queryset = queryset.filter(state=params["q_state"])
            parts.append(f"state {params['q_state']}")
        if not parts and not params.get("q_pool"):
            raise SelectionError("choose runs: a sweep, run ids, or at least one filter")
        description = "runs with " + (", ".join(parts) or "any settings")
    runs = list(queryset.distinct().order_by("id")[: MAX_RUNS * 5])
    found = {run.pk for run in runs}
    missing_runs = tuple(sorted({pk for pk in ids if pk not in found}))
    missing_sweep = sweep_id if sweep_id is not None and not runs else None
    if params.get("q_pool"):
        wanted = sorted(name.strip() for name in params["q_pool"].split(",") if name.strip())
        runs = [run for run in runs if sorted(run.policy_names) == wanted]
        description += f" on pool {', '.join(wanted)}"
    truncated = len(runs) > MAX_RUNS
    return Selection(
        runs=runs[:MAX_RUNS],
        description=description,
        truncated=truncated,
        missing_runs=missing_runs,
        missing_sweep=missing_sweep,
    )


def view_query(params: QueryDict) -> QueryDict:
    """``params`` without the selection (what the view settings alone are)."""
    query = params.copy()
    for key in SELECTION_KEYS:
        query.pop(key, None)
    return query
