"""From the API's JSON to flat records (always) and pandas DataFrames (when pandas is
installed): the pure half of the client, no I/O.

Names of the columns:

- a run: ``id``, ``name``, ``experiment``, ``experiment_id``, ``sweep``, ``lab``,
  ``owner``, ``state``, ``regime``, ``off_policy``, ``seed``, ``policies``, ``tags``,
  ``last_step``, the timestamps, ``duration_s``, ``url``; its config flattened into
  ``config.<dotted.path>`` (lists, such as ``config.pool``, stay whole in their cell);
  and per metric asked for and policy ``final/<policy>/<key>``, ``final_step/...``,
  ``best/...``, ``best_step/...``, ``n_points/...``
  (``best/_pool/val/reward@1``: the pool mean's best validation reward);
- a history point: ``run``, ``policy``, ``key``, ``step``, ``x``, ``value``;
- a transfer event: ``run``, ``id``, ``step``, ``source``, ``target``, ``kind``,
  ``prompt_id``, ``count``, ``weight``, ``has_samples``;
- a comparison point: ``policy``, ``metric``, ``group``, ``group_name``, ``x``, ``mean``,
  ``lower``, ``upper``, ``n``, ``raw_mean``.

Values the API writes as "NaN", "Infinity" and "-Infinity" become floats.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
Record = dict[str, Any]
RUN_FIELDS = (
    *("id", "name", "state", "regime", "off_policy", "seed", "lab", "owner", "sweep"),
    *("policies", "tags", "last_step", "created_at", "queued_at", "submitted_at"),
    *("started_at", "finished_at", "duration_s"),
)
VALUE_FIELDS = ("final", "final_step", "best", "best_step", "n_points")
TIME_COLUMNS = ("created_at", "queued_at", "submitted_at", "started_at", "finished_at")


def number(value: Any) -> Any:
    """A value of the API as a Python number: "NaN" / "Infinity" / "-Infinity" as floats,
    None (unknown) as NaN; anything else as it is."""
    if value is None:
        return math.nan
    if isinstance(value, str):
        return NON_FINITE.get(value, value)
    return value


def flatten(mapping: Mapping[str, Any], prefix: str) -> Record:
    """``{"a": {"b": 1}, "c": [1]}`` -> ``{"<prefix>.a.b": 1, "<prefix>.c": [1]}``."""
    flat: Record = {}
    for name, value in mapping.items():
        path = f"{prefix}.{name}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, path))
        else:
            flat[path] = value
    return flat


def run_record(run: Mapping[str, Any]) -> Record:
    """One run of ``GET /api/v1/runs`` as one flat row."""
    record: Record = {name: run.get(name) for name in RUN_FIELDS}
    experiment = run.get("experiment") or {}
    record["experiment"] = experiment.get("name")
    record["experiment_id"] = experiment.get("id")
    record["url"] = (run.get("links") or {}).get("page")
    record.update(flatten(run.get("config") or {}, "config"))
    for key, by_policy in (run.get("metrics") or {}).items():
        for policy, values in by_policy.items():
            for field in VALUE_FIELDS:
                value = values.get(field)
                record[f"{field}/{policy}/{key}"] = (
                    number(value) if field in ("final", "best") else value
                )
    return record


def history_records(reply: Mapping[str, Any]) -> list[Record]:
    """``GET /api/v1/runs/<id>/history``'s reply as long rows, one a point."""
    rows: list[Record] = []
    run = reply["run"]
    for series in reply["series"]:
        xs = series.get("x")
        steps, values = series["step"], series["value"]
        for index, step in enumerate(steps):
            rows.append(
                {
                    "run": run,
                    "policy": series["policy"],
                    "key": series["key"],
                    "step": step,
                    "x": step if xs is None else number(xs[index]),
                    "value": number(values[index]),
                }
            )
    return rows


def event_records(run: int, events: Iterable[Mapping[str, Any]]) -> list[Record]:
    return [{"run": run, **event} for event in events]


def comparison_records(comparison: Mapping[str, Any]) -> list[Record]:
    """The curves of a comparison (``"comparison"`` of the saved comparison's reply, or
    ``GET /api/v1/compare``'s reply) as long rows: one per panel, group and x."""
    names = {group["label"]: group.get("name", group["label"]) for group in comparison["groups"]}
    rows: list[Record] = []
    for panel in comparison["panels"]:
        for trace in panel["traces"]:
            columns = [trace[name] for name in ("x", "mean", "lower", "upper", "n", "raw_mean")]
            for x, mean, lower, upper, n, raw_mean in zip(*columns, strict=True):
                rows.append(
                    {
                        "policy": panel["policy"],
                        "metric": panel["metric"],
                        "group": trace["group"],
                        "group_name": names.get(trace["group"], trace["group"]),
                        "x": number(x),
                        "mean": number(mean),
                        "lower": number(lower),
                        "upper": number(upper),
                        "n": n,
                        "raw_mean": number(raw_mean),
                    }
                )
    return rows


# --------------------------------------------------------------------------- pandas

PANDAS_MISSING = (
    "this needs pandas, an optional dependency of mutual_rl_lab_client: "
    "pip install 'mutual_rl_lab_client[pandas]' (or pandas); the *_records methods "
    "return plain lists of dicts without it"
)


def pandas_module() -> Any:
    """pandas, or an ImportError that says how to get it."""
    try:
        import pandas
    except ImportError as error:
        raise ImportError(PANDAS_MISSING) from error
    return pandas


def frame(records: list[Record], columns: Iterable[str] = ()) -> Any:
    """A DataFrame of ``records`` (``columns`` first, in that order, even when there are
    no records)."""
    pandas = pandas_module()
    leading = list(columns)
    if not records:
        return pandas.DataFrame(columns=leading)
    table = pandas.DataFrame.from_records(records)
    rest = [name for name in table.columns if name not in leading]
    return table[[name for name in leading if name in table.columns] + rest]


def runs_frame(records: list[Record]) -> Any:
    """One row a run; the timestamps as UTC datetimes."""
    pandas = pandas_module()
    table = frame(records, ("id", "name", "experiment", "experiment_id", *RUN_FIELDS[2:]))
    for column in TIME_COLUMNS:
        if column in table.columns:
            table[column] = pandas.to_datetime(table[column], utc=True, format="ISO8601")
    return table
