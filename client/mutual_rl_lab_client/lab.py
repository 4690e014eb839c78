"""``Lab``: the lab's read API from Python.

    lab = Lab("http://127.0.0.1:8000", token="mrlp_...")
    runs = lab.runs(regime="sgt", state="completed", config={"sgt.lambda_sgt": 0.1},
                    metrics=["val/reward@1"])
    curves = lab.history(runs, ["val/reward@1"], x="tokens")

Each method returning a DataFrame has a ``*_records`` twin returning plain dicts
(:mod:`mutual_rl_lab_client.frames` names the columns), for use without pandas.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import date, datetime
from typing import Any

from mutual_rl_lab_client import frames
from mutual_rl_lab_client.transport import Params, ParamValue, Transport

TOKEN_VARIABLE = "MRL_API_TOKEN"
RUN_FILTERS = (
    *("id", "experiment", "experiment_name", "sweep", "regime", "off_policy", "state"),
    *("seed", "tag", "owner", "lab", "created_after", "created_before"),
)
RUNS_PAGE, EVENTS_PAGE = 1000, 1000
X_AXES = ("step", "rollouts", "tokens")


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        return [value]
    return list(value)


def _filter_text(value: Any) -> ParamValue:
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


def run_ids(runs: Any) -> list[int]:
    """Run ids from an id, a list of ids, run dicts, or a DataFrame with an ``id``
    column (what :meth:`Lab.runs` returns)."""
    if hasattr(runs, "columns") and "id" in runs.columns:
        return [int(pk) for pk in runs["id"].tolist()]
    ids = []
    for run in _as_list(runs):
        ids.append(int(run["id"]) if isinstance(run, Mapping) else int(run))
    return ids


class Lab:
    """A Mutual RL Lab's read API at ``url`` (its root, e.g. ``http://127.0.0.1:8000``),
    read with a personal ``token`` (default: the ``MRL_API_TOKEN`` environment variable).

    Requests that get no answer, or a 429/502/503/504, are retried ``retries`` times with
    a doubling pause from ``backoff`` seconds; errors are raised as
    :mod:`mutual_rl_lab_client.errors` (``Unauthorized``, ``Forbidden``, ``NotFound``...).
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 60.0,
        retries: int = 3,
        backoff: float = 0.5,
    ) -> None:
        base = url.rstrip("/")
        base = base.removesuffix("/api/v1")
        self.url = base
        self.transport = Transport(
            base,
            token if token is not None else os.environ.get(TOKEN_VARIABLE),
            timeout=timeout,
            retries=retries,
            backoff=backoff,
        )

    def __repr__(self) -> str:
        return f"Lab({self.url!r})"

    # ----------------------------------------------------------------------- runs

    def _runs_params(
        self,
        filters: Mapping[str, Any],
        config: Mapping[str, Any] | None,
        metrics: Sequence[str],
        policies: Sequence[str],
        lower_is_better: bool,
        page_size: int,
    ) -> list[tuple[str, ParamValue]]:
        unknown = sorted(set(filters) - set(RUN_FILTERS))
        if unknown:
            raise TypeError(
                f"unknown run filter(s) {unknown}; use {list(RUN_FILTERS)}, or "
                "config={'dotted.path': value} for a config field"
            )
        params: list[tuple[str, ParamValue]] = []
        for name in RUN_FILTERS:
            params += [(name, _filter_text(v)) for v in _as_list(filters.get(name))]
        for path, value in (config or {}).items():
            name = path if path.startswith("config.") else f"config.{path}"
            params += [(name, json.dumps(v)) for v in _as_list(value)]
        params += [("metric", key) for key in _as_list(metrics)]
        params += [("policy", policy) for policy in _as_list(policies)]
        if lower_is_better:
            params.append(("lower_is_better", True))
        params.append(("limit", page_size))
        return params

    def iter_runs(
        self,
        *,
        config: Mapping[str, Any] | None = None,
        metrics: Sequence[str] = (),
        policies: Sequence[str] = (),
        lower_is_better: bool = False,
        limit: int | None = None,
        **filters: Any,
    ) -> Iterator[dict[str, Any]]:
        """The runs as the API gives them (newest first), page after page; see
        :meth:`runs` for the arguments."""
        page_size = min(RUNS_PAGE, limit) if limit else RUNS_PAGE
        params = self._runs_params(filters, config, metrics, policies, lower_is_better, page_size)
        reply = self.transport.get("/api/v1/runs", params)
        given = 0
        while True:
            for run in reply["runs"]:
                if limit is not None and given >= limit:
                    return
                given += 1
                yield run
            if not reply.get("next") or (limit is not None and given >= limit):
                return
            reply = self.transport.get_url(reply["next"], what="the reply's next page")

    def run_records(self, **arguments: Any) -> list[dict[str, Any]]:
        """:meth:`runs` as flat dicts (no pandas needed)."""
        return [frames.run_record(run) for run in self.iter_runs(**arguments)]

    def runs(
        self,
        *,
        config: Mapping[str, Any] | None = None,
        metrics: Sequence[str] = (),
        policies: Sequence[str] = (),
        lower_is_better: bool = False,
        limit: int | None = None,
        **filters: Any,
    ) -> Any:
        """A DataFrame of the runs you may see that pass the filters, one row a run,
        newest first, the config flattened into ``config.<path>`` columns.

        Filters (a value or a list of alternatives): ``id``, ``experiment`` (id),
        ``experiment_name``, ``sweep`` (id), ``regime``, ``off_policy``, ``state``,
        ``seed``, ``tag`` (a list: every tag), ``owner`` (username), ``lab`` (name),
        ``created_after`` / ``created_before`` (date, datetime or ISO text); ``config``:
        ``{"sgt.lambda_sgt": 0.1, "grpo.kl_coef__gte": 0.001}`` (dotted paths, a suffix
        ``__gt``/``__gte``/``__lt``/``__lte`` compares numbers). ``metrics``: keys whose
        final and best value (and steps) each run carries, per policy (``policies``:
        only those), as ``final/<policy>/<key>``...; ``lower_is_better`` makes best the
        lowest. ``limit``: at most this many runs."""
        return frames.runs_frame(
            self.run_records(
                config=config,
                metrics=metrics,
                policies=policies,
                lower_is_better=lower_is_better,
                limit=limit,
                **filters,
            )
        )

    # ----------------------------------------------------------------------- history

    def history_records(
        self,
        runs: Any,
        keys: Sequence[str] | str = (),
        *,
        policies: Sequence[str] | str = (),
        x: str = "step",
        max_points: int | None = None,
    ) -> list[dict[str, Any]]:
        """:meth:`history` as dicts (no pandas needed)."""
        if x not in X_AXES:
            raise ValueError(f"x must be one of {X_AXES}, not {x!r}")
        rows: list[dict[str, Any]] = []
        for run in run_ids(runs):
            params: list[tuple[str, ParamValue]] = [("key", key) for key in _as_list(keys)]
            params += [("policy", policy) for policy in _as_list(policies)]
            params.append(("x", x))
            if max_points is not None:
                params.append(("max_points", max_points))
            rows += frames.history_records(
                self.transport.get(f"/api/v1/runs/{run}/history", params)
            )
        return rows

    def history(
        self,
        runs: Any,
        keys: Sequence[str] | str = (),
        *,
        policies: Sequence[str] | str = (),
        x: str = "step",
        max_points: int | None = None,
    ) -> Any:
        """A long DataFrame (``run``, ``policy``, ``key``, ``step``, ``x``, ``value``) of
        the curves ``keys`` (none: every metric) of ``runs`` (ids, or :meth:`runs`'
        DataFrame), every policy's or ``policies``'. ``x``: ``step``, ``rollouts`` or
        ``tokens`` (the policy's consumption counter at each step; NaN where unknown).
        ``max_points``: downsample each curve to at most that many points, keeping its
        extremes (absent: every point stored)."""
        records = self.history_records(runs, keys, policies=policies, x=x, max_points=max_points)
        return frames.frame(records, ("run", "policy", "key", "step", "x", "value"))

    # ----------------------------------------------------------------------- events

    def event_records(
        self,
        run: int,
        *,
        kind: str | None = None,
        source: str | None = None,
        target: str | None = None,
        step_min: int | None = None,
        step_max: int | None = None,
    ) -> list[dict[str, Any]]:
        """:meth:`events` as dicts (no pandas needed)."""
        (run_id,) = run_ids(run)
        base: Params = [
            (name, value)
            for name, value in (
                ("kind", kind),
                ("source", source),
                ("target", target),
                ("step_min", step_min),
                ("step_max", step_max),
            )
            if value is not None
        ]
        events: list[dict[str, Any]] = []
        while True:
            params = [*base, ("limit", EVENTS_PAGE), ("offset", len(events))]
            reply = self.transport.get(f"/api/v1/runs/{run_id}/events", params)
            events += reply["events"]
            if not reply["events"] or len(events) >= reply["total"]:
                return frames.event_records(run_id, events)

    def events(self, run: int, **filters: Any) -> Any:
        """A DataFrame of ``run``'s peer-transfer log, by step: ``kind`` (``rollout``,
        ``advantage_stats``, ``success``...), ``source``, ``target``, ``step_min``,
        ``step_max`` filter it."""
        return frames.frame(
            self.event_records(run, **filters),
            ("run", "id", "step", "source", "target", "kind", "prompt_id", "count", "weight"),
        )

    # ----------------------------------------------------------------------- comparisons

    def comparison_data(self, saved: str | int) -> dict[str, Any]:
        """The saved comparison's reply as the API gives it: ``saved``, ``selection``,
        ``comparison`` (the compare page's curves)."""
        ref = str(saved).rstrip("/").rsplit("/", 1)[-1]  # a slug, an id, or its page URL
        reply: dict[str, Any] = self.transport.get(f"/api/v1/compare/saved/{ref}")
        return reply

    def comparison_records(self, saved: str | int) -> list[dict[str, Any]]:
        """:meth:`comparison` as dicts (no pandas needed)."""
        return frames.comparison_records(self.comparison_data(saved)["comparison"])

    def comparison(self, saved: str | int) -> Any:
        """The curves of a saved comparison (its slug, id or page URL) as its page draws
        them: a long DataFrame, one row per (policy, metric, group, x) with the group's
        ``mean``, band (``lower``, ``upper``), ``n`` runs and unsmoothed ``raw_mean``.
        ``.attrs`` holds the saved comparison, its runs, notes and axis label."""
        data = self.comparison_data(saved)
        table = frames.frame(
            frames.comparison_records(data["comparison"]),
            ("policy", "metric", "group", "group_name", "x", "mean", "lower", "upper", "n"),
        )
        table.attrs.update(
            saved=data["saved"],
            runs=data["selection"]["runs"],
            notes=data["comparison"].get("notes", []),
            x_label=data["comparison"].get("x_label"),
            spec=data["comparison"].get("spec"),
        )
        return table
