"""Which metrics the run page charts, grouped as a researcher reads them, and their names.

Derived from the trainer's metric catalogue (:func:`trainer.metrics.catalogue`: the core
keys and every registered regime's): one place says what a metric is called, its unit
and its chart group. Each chart shows one
metric key with one trace per policy. Keys a run never reported are skipped; keys not
listed here appear under "Other".
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer import metrics as m


@dataclass(frozen=True)
class MetricGroup:
    slug: str
    title: str
    keys: tuple[str, ...]


def metric_groups() -> tuple[MetricGroup, ...]:
    """The run page's chart groups, in order, each with its catalogued keys."""
    entries = m.catalogue().entries
    groups = [
        MetricGroup(group.slug, group.title, tuple(i.key for i in entries if i.group == group))
        for group in m.GROUPS
    ]
    return tuple(group for group in groups if group.keys)


def groups_as_json() -> list[dict[str, object]]:
    """The groups for the run page's JavaScript: ``[{"slug", "title", "keys"}]``."""
    return [{"slug": g.slug, "title": g.title, "keys": list(g.keys)} for g in metric_groups()]


def metric_json(key: str) -> dict[str, str]:
    """``{"label", "unit", "group"}`` of ``key`` (:func:`trainer.metrics.describe`)."""
    info = m.describe(key)
    return {"label": info.label, "unit": info.unit, "group": info.group.slug}


def metrics_as_json() -> dict[str, dict[str, str]]:
    """Each catalogued metric's display facts for the page's JavaScript:
    ``{key: {"label": ..., "unit": ..., "group": slug}}``. A key missing here is shown
    by its name, under "Other"."""
    return {info.key: metric_json(info.key) for info in m.catalogue().entries}


def families_as_json() -> list[dict[str, str]]:
    """The catalogue's key families for the page's JavaScript: ``[{"pattern", "label",
    "unit", "group"}]``; ``pattern`` is a JavaScript regular expression matching the whole
    key (named groups written ``(?<name>...)``), ``label`` a template of those names
    ("Validation reward@1 · {skill}")."""
    return [
        {
            "pattern": "^(?:" + pattern.pattern.replace("(?P<", "(?<") + ")$",
            "label": label,
            "unit": unit,
            "group": group.slug,
        }
        for pattern, label, unit, group in m.catalogue().families
    ]
