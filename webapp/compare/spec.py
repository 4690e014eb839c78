"""What a comparison shows: runs, grouping, metrics, policies, x-axis, band, smoothing.

A :class:`ComparisonSpec` is read from a query string (:meth:`ComparisonSpec.from_query`)
and written back to one (:meth:`ComparisonSpec.to_query`): the compare page, the JSON
endpoints, the exports and saved comparisons all speak this one format::

    runs=3,7,12&group_by=regime&metric=val/reward@1&metric=train/reward_mean
    &policy=qwen&x=step&band=std&smooth=0.6&log_y=1&buckets=500

Parameters the spec does not know (``columns``, ``table_metric``, the page's selection
filters...) are ignored, so one query string can carry everything.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from trainer import metrics as m
from webapp.compare.grouping import EXPERIMENT, GROUP_BY_PATTERN
from webapp.compare.stats import BANDS
from webapp.core.digits import PARAM_DIGITS, ascii_digits, ascii_int
from webapp.core.flags import flag_value

if TYPE_CHECKING:  # a QueryDict's reading methods only: no Django at run time
    from django.http import QueryDict

X_AXES = ("step", "rollouts", "tokens", "wall_time")
DEFAULT_METRICS = (m.VAL_REWARD_AT_1, m.TRAIN_REWARD_MEAN)
DEFAULT_TABLE_METRIC = m.VAL_REWARD_AT_1
"""The summary table's metric when the query names none (webapp.compare.views)."""
MAX_RUNS, MAX_METRICS, MAX_POLICIES = 200, 16, 8
MIN_BUCKETS, MAX_BUCKETS, DEFAULT_BUCKETS = 10, 2000, 500
METRIC_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./@:+-]{0,127}$")
POLICY_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


class SpecError(ValueError):
    """A comparison parameter with a bad value; the message starts with its name."""


@dataclass(frozen=True)
class ComparisonSpec:
    runs: tuple[int, ...]
    group_by: str = "regime"
    metrics: tuple[str, ...] = DEFAULT_METRICS
    policies: tuple[str, ...] = ()
    x: str = "step"
    band: str = "std"
    smooth: float = 0.0
    log_y: bool = False
    buckets: int = DEFAULT_BUCKETS

    def __post_init__(self) -> None:
        if not self.runs:
            raise SpecError("runs: choose at least one run")
        if len(self.runs) > MAX_RUNS:
            raise SpecError(f"runs: at most {MAX_RUNS} runs, not {len(self.runs)}")
        if any(run < 1 for run in self.runs):
            raise SpecError("runs: run ids are positive integers")
        if self.group_by != EXPERIMENT and not GROUP_BY_PATTERN.match(self.group_by):
            raise SpecError(
                f"group_by: {self.group_by[:80]!r} is not a config path; use a dotted path "
                "of the trainer config such as 'regime', 'off_policy', 'grpo.kl_coef', "
                "'seed', or 'experiment'"
            )
        if not self.metrics:
            raise SpecError("metric: choose at least one metric")
        if len(self.metrics) > MAX_METRICS:
            raise SpecError(f"metric: at most {MAX_METRICS} metrics, not {len(self.metrics)}")
        for metric in self.metrics:
            if not METRIC_PATTERN.match(metric):
                raise SpecError(f"metric: {metric[:80]!r} is not a metric name")
        if len(self.policies) > MAX_POLICIES:
            raise SpecError(f"policy: at most {MAX_POLICIES} policies, not {len(self.policies)}")
        for policy in self.policies:
            if not POLICY_PATTERN.match(policy):
                raise SpecError(f"policy: {policy[:80]!r} is not a policy name")
        if self.x not in X_AXES:
            raise SpecError(f"x: must be one of {list(X_AXES)}, not {self.x[:40]!r}")
        if self.band not in BANDS:
            raise SpecError(f"band: must be one of {list(BANDS)}, not {self.band[:40]!r}")
        if not (math.isfinite(self.smooth) and 0.0 <= self.smooth < 1.0):
            raise SpecError(f"smooth: must be in [0, 1), not {self.smooth}")
        if not MIN_BUCKETS <= self.buckets <= MAX_BUCKETS:
            raise SpecError(
                f"buckets: must be in [{MIN_BUCKETS}, {MAX_BUCKETS}], not {self.buckets}"
            )

    # ----------------------------------------------------------------------- query

    @classmethod
    def from_query(cls, query: QueryDict) -> ComparisonSpec:
        """Parse ``runs=1,2`` (or repeated ``run=``), ``group_by``, ``metric`` and
        ``policy`` (repeatable), ``x``, ``band``, ``smooth``, ``log_y``, ``buckets``.

        Run ids are sorted and deduplicated; metrics and policies keep their order, once
        each. Raises :class:`SpecError` naming the parameter.
        """
        runs = _run_ids(query)
        return cls(
            runs=runs,
            group_by=query.get("group_by", "") or "regime",
            metrics=_unique(query.getlist("metric")) or DEFAULT_METRICS,
            policies=_unique(query.getlist("policy")),
            x=query.get("x", "") or "step",
            band=query.get("band", "") or "std",
            smooth=_float(query, "smooth", 0.0),
            log_y=bool_param(query, "log_y"),
            buckets=_int(query, "buckets", DEFAULT_BUCKETS),
        )

    def to_query(self) -> str:
        """The canonical query string: every parameter, in a fixed order."""
        pairs: list[tuple[str, str]] = [
            ("runs", ",".join(str(run) for run in self.runs)),
            ("group_by", self.group_by),
        ]
        pairs += [("metric", metric) for metric in self.metrics]
        pairs += [("policy", policy) for policy in self.policies]
        pairs += [
            ("x", self.x),
            ("band", self.band),
            ("smooth", repr(float(self.smooth))),
            ("log_y", "1" if self.log_y else "0"),
            ("buckets", str(self.buckets)),
        ]
        return urlencode(pairs, safe="/@,:")


def _unique(values: list[str]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for value in values:
        value = value.strip()
        if value:
            seen.setdefault(value, None)
    return tuple(seen)


def _run_ids(query: QueryDict) -> tuple[int, ...]:
    texts = [query.get("runs", ""), *query.getlist("run")]
    ids: set[int] = set()
    for text in texts:
        for item in text.split(","):
            item = item.strip()
            if not item:
                continue
            run_id = ascii_digits(item, max_digits=12)
            if run_id is None:
                raise SpecError(f"runs: expected comma-separated run ids, got {item[:40]!r}")
            ids.add(run_id)
    if len(ids) > MAX_RUNS:
        raise SpecError(f"runs: at most {MAX_RUNS} runs, not {len(ids)}")
    return tuple(sorted(ids))


def _float(query: QueryDict, name: str, default: float) -> float:
    raw = query.get(name, "").strip()
    if raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise SpecError(f"{name}: must be a number, not {raw[:40]!r}") from None


def _int(query: QueryDict, name: str, default: int) -> int:
    raw = query.get(name, "").strip()
    if raw == "":
        return default
    number = ascii_int(raw, max_digits=PARAM_DIGITS)
    if number is None:
        raise SpecError(f"{name}: must be an integer, not {raw[:40]!r}")
    return number


def bool_param(query: QueryDict, name: str) -> bool:
    """A yes/no parameter (:func:`webapp.core.flags.flag_value`); a :class:`SpecError`."""
    try:
        return flag_value(name, query.get(name, ""))
    except ValueError as error:
        raise SpecError(str(error)) from None
