"""A comparison and a summary table as JSON-ready dicts (the compare endpoints' replies).

Numbers are floats; non-finite ones are the strings "NaN", "Infinity", "-Infinity", as
everywhere in the API (:func:`webapp.core.http.encode_value`). The CSV exports write the
same values with the same spelling (:func:`webapp.compare.export.number_text`), so the two
always agree.

Keys (``policy``, ``metric``) stay as logged; next to them go the names people read,
from the metric catalogue (``policy_label``: "pool mean" for ``_pool``; ``metric_label``:
"Validation reward@1"; ``y_label``: with the unit; ``title``: "policy · metric").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from trainer import metrics as m
from trainer.stats import Interval, interval_decimals, p_number
from webapp.compare.assemble import Comparison, Group, Summary
from webapp.compare.bars import VIEW_TITLES, BarChart
from webapp.compare.significance import Significance
from webapp.compare.stats import MeanStd
from webapp.core.http import encode_value


def floats(values: np.ndarray) -> np.ndarray | list[float | str | None]:
    """A float array ready for :func:`webapp.core.http.json_reply`: the array itself when
    every value is finite (orjson writes numpy arrays, without a Python float per value:
    a third of a 50-run comparison's encoding), else a list with the non-finite values as
    strings."""
    array = np.ascontiguousarray(values, dtype=float)
    if np.isfinite(array).all():
        return array
    return [encode_value(value) for value in array.tolist()]


def groups_json(groups: Sequence[Group]) -> list[dict[str, Any]]:
    """``[{"label", "name", "colour", "dash", "runs"}]``, in the groups' order: ``label``
    is the group's key (the traces' ``group``), ``name`` what legends show
    ("sgt.lambda_sgt = 0.05")."""
    return [
        {"label": g.label, "name": g.name, "colour": g.colour, "dash": g.dash, "runs": g.runs}
        for g in groups
    ]


def comparison_json(comparison: Comparison) -> dict[str, Any]:
    """``{"spec", "groups": [{"label", "name", "colour", "dash", "runs"}], "panels": [{"policy",
    "metric", "policy_label", "metric_label", "y_label", "title", "x_label", "traces":
    [{"group", "colour", "dash", "x", "mean", "lower", "upper", "n", "raw_mean"}]}],
    "notes", "x_label", "grid"}``."""
    return {
        "spec": comparison.spec.to_query(),
        "groups": groups_json(comparison.groups),
        "panels": [
            {
                "policy": panel.policy,
                "metric": panel.metric,
                "policy_label": panel.policy_label,
                "metric_label": panel.metric_label,
                "y_label": panel.y_label,
                "title": panel.title,
                "x_label": panel.x_label,
                "traces": [
                    {
                        "group": trace.group,
                        "colour": trace.colour,
                        "dash": trace.dash,
                        "x": floats(trace.x),
                        "mean": floats(trace.mean),
                        "lower": floats(trace.lower),
                        "upper": floats(trace.upper),
                        "n": np.ascontiguousarray(trace.n, dtype=np.int64),
                        "raw_mean": floats(trace.raw_mean),
                    }
                    for trace in panel.traces
                ],
            }
            for panel in comparison.panels
        ],
        "notes": comparison.notes,
        "x_label": comparison.x_label,
        "grid": comparison.grid,
    }


def mean_std_json(value: MeanStd) -> dict[str, Any]:
    return {"mean": value.mean, "std": value.std, "n": value.n}


def summary_json(summary: Summary) -> dict[str, Any]:
    """``{"metric", "metric_label", "lower_is_better", "groups": [labels], "group_names":
    {label: name}, "colours": {label: colour}, "policies", "policy_labels": {policy:
    label}, "rows": [{"policy", "policy_label", "cells": [{"group", "final": {"mean", "std", "n"},
    "best": {...}, "mean": {...}}]}], "best": {"final": {policy: group}, "best": ...,
    "mean": ...}, "notes"}``; ``mean``/``std`` are null without runs / below two runs."""
    return {
        "metric": summary.metric,
        "metric_label": m.label(summary.metric),
        "lower_is_better": summary.lower_is_better,
        "groups": [group.label for group in summary.groups],
        "group_names": {group.label: group.name for group in summary.groups},
        "colours": {group.label: group.colour for group in summary.groups},
        "policies": summary.policies,
        "policy_labels": {
            policy: m.policy_label(policy, summary.metric) for policy in summary.policies
        },
        "rows": [
            {
                "policy": row.policy,
                "policy_label": m.policy_label(row.policy, summary.metric),
                "cells": [
                    {
                        "group": cell.group,
                        "final": mean_std_json(cell.final),
                        "best": mean_std_json(cell.best),
                        "mean": mean_std_json(cell.mean),
                    }
                    for cell in row.cells
                ],
            }
            for row in summary.rows
        ],
        "best": summary.best,
        "notes": summary.notes,
    }


def bars_json(chart: BarChart) -> dict[str, Any]:
    """``{"view", "title", "spec", "groups": [{"label", "name", "colour", "dash", "runs"}],
    "suites": {suite: [tasks]}, "suite", "score", "baseline", "metrics", "zero_line",
    "interval_note", "empty", "panels": [{"policy", "title", "x_label", "y_label", "categories",
    "category_labels", "base", "base_label", "message", "traces": [{"group", "colour", "dash",
    "mean", "lower", "upper", "n", "std"}]}], "notes"}``. ``spec`` is the whole query
    (the spec's and the bar options); ``empty`` says in words why nothing is drawn (else
    null); ``base`` is per category the base model's value (tasks) or the baseline
    group's mean (relative); a panel's ``message`` says why it has no bars ("" if it has).
    In the relative view ``lower``/``upper`` are each bar's 95% interval and
    ``interval_note`` says which (:attr:`webapp.compare.bars.BarChart.interval_note`;
    "" in the per-task view, whose ``lower``/``upper`` are the spec's band)."""
    return {
        "view": chart.view,
        "title": VIEW_TITLES[chart.view],
        "spec": chart.query,
        "groups": groups_json(chart.groups),
        "suites": chart.suites,
        "suite": chart.suite,
        "score": chart.options.score,
        "baseline": chart.baseline,
        "metrics": list(chart.options.metrics),
        "zero_line": chart.zero_line,
        "interval_note": chart.interval_note,
        "empty": chart.empty,
        "panels": [
            {
                "policy": panel.policy,
                "title": panel.title,
                "x_label": panel.x_label,
                "y_label": panel.y_label,
                "categories": panel.categories,
                "category_labels": panel.category_labels,
                "base": floats(panel.base),
                "base_label": panel.base_label,
                "message": panel.message,
                "traces": [
                    {
                        "group": trace.group,
                        "colour": trace.colour,
                        "dash": trace.dash,
                        "mean": floats(trace.mean),
                        "lower": floats(trace.lower),
                        "upper": floats(trace.upper),
                        "n": np.ascontiguousarray(trace.n, dtype=np.int64),
                        "std": floats(trace.std),
                    }
                    for trace in panel.traces
                ],
            }
            for panel in chart.panels
        ],
        "notes": chart.notes,
    }


def interval_json(interval: Interval | None) -> dict[str, Any] | None:
    """``{"method", "estimate", "low", "high", "n", "n_other", "df", "p", "p_adjusted",
    "p_text", "p_adjusted_text", "decimals", "level", "no_spread"}`` (non-finite numbers as strings;
    ``p_adjusted`` null when not adjusted; the ``_text`` ones as tables show them, "" for
    none; ``decimals``: how many the page shows, :func:`trainer.stats.interval_decimals`)."""
    if interval is None:
        return None
    return {
        "method": interval.method,
        "estimate": encode_value(interval.estimate),
        "low": encode_value(interval.low),
        "high": encode_value(interval.high),
        "n": interval.n,
        "n_other": interval.n_other,
        "df": encode_value(interval.df),
        "p": encode_value(interval.p),
        "p_adjusted": None if interval.p_adjusted is None else encode_value(interval.p_adjusted),
        "p_text": p_number(interval.p),
        "p_adjusted_text": "" if interval.p_adjusted is None else p_number(interval.p_adjusted),
        "decimals": interval_decimals(interval),
        "level": interval.level,
        "no_spread": interval.no_spread,
    }


def significance_json(table: Significance) -> dict[str, Any]:
    """``{"view": "significance", "title", "spec", "groups": [{"label", "name", "colour",
    "dash", "runs"}], "baseline", "metrics", "step" (null: each run's final value), "where",
    "level", "correction" ("" for none), "method" (in words), "empty", "primary" (the
    parameter, "" for none), "rows": [{"policy", "policy_label", "metric", "metric_label",
    "group", "colour", "interval": {...} | null, "group_mean", "baseline_mean", "seeds",
    "unpaired", "steps", "note", "sentence", "primary" (bool), "sweep_url" ("" unless one
    seed)}], "notes"}``; ``interval`` is :func:`interval_json`'s, null without a value on
    a side; ``title`` names the tests used (:attr:`Significance.title`)."""
    return {
        "view": table.view,
        "title": table.title,
        "spec": table.query,
        "groups": groups_json(table.groups),
        "baseline": table.baseline,
        "metrics": list(table.options.metrics),
        "step": table.step,
        "where": table.where,
        "level": table.level,
        "correction": table.correction,
        "method": table.method_text,
        "empty": table.empty,
        "primary": "" if table.primary is None else table.primary.text,
        "rows": [
            {
                "policy": row.policy,
                "policy_label": row.policy_label,
                "metric": row.metric,
                "metric_label": row.metric_label,
                "group": row.group,
                "colour": row.colour,
                "interval": interval_json(row.interval),
                "group_mean": encode_value(row.group_mean),
                "baseline_mean": encode_value(row.baseline_mean),
                "seeds": list(row.seeds),
                "unpaired": list(row.unpaired),
                "steps": list(row.steps),
                "note": row.note,
                "sentence": row.sentence,
                "primary": row.primary,
                "sweep_url": row.sweep_url,
            }
            for row in table.rows
        ],
        "notes": table.notes,
    }
