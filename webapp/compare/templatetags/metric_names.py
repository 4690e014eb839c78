"""Template filters that name metrics and policies as people read them, from the metric
catalogue (:mod:`trainer.metrics`): ``{{ key|metric_label }}`` gives "Validation
reward@1", ``{{ name|policy_label }}`` gives "pool mean" for ``_pool``."""

from __future__ import annotations

from django import template

from trainer import metrics as m

register = template.Library()


@register.filter
def metric_label(key: str) -> str:
    return m.label(str(key))


@register.filter
def policy_label(name: str) -> str:
    return m.policy_label(str(name))


@register.simple_tag
def list_metric_key() -> str:
    """The key of the runs list's and sweep page's Final / Best columns
    (:func:`webapp.metrics.run_columns.reward_columns`): ``val/reward@1``."""
    return m.VAL_REWARD_AT_1
