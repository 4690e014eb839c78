"""``{% zoo_build_button field %}``: beside a policy's "zoo model not built" error, the
button that builds its recipe as a job, or how far that build is
(:mod:`webapp.experiments.zoo_builds`)."""

from __future__ import annotations

from typing import Any

from django import template
from django.forms import BoundField

from trainer.zoo import ZOO_PREFIX, recipe_of
from webapp.experiments import zoo_builds
from webapp.experiments.compose_sources import zoo_build_problem

register = template.Library()


@register.inclusion_tag("experiments/_zoo_build.html")
def zoo_build_button(field: BoundField) -> dict[str, Any]:
    """What to show under the model field ``field``: nothing unless it names (itself, or
    through the registry entry it resolves to) a zoo model that is not built."""
    resolved = getattr(field.form, "resolved", None)
    source = str(getattr(resolved, "source", None) or field.value() or "")
    if not source.startswith(ZOO_PREFIX) or zoo_build_problem(source) is None:
        return {"recipe": None}
    recipe = recipe_of(source[len(ZOO_PREFIX) :])
    return {"recipe": recipe, "building": recipe and zoo_builds.active_status(recipe)}
