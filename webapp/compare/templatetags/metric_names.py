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
