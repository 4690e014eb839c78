"""``{% zoo_build_button field %}``: beside a policy's "zoo model not built" error, the
button that builds its recipe as a job, or how far that build is
(:mod:`webapp.registry.zoo_builds`)."""

from __future__ import annotations

from typing import Any

from django import template
from django.forms import BoundField

from trainer.zoo import RECIPE_EXTRAS, ZOO_PREFIX, recipe_of
from webapp.registry import zoo_builds
from webapp.registry.sources import zoo_build_problem

register = template.Library()


@register.inclusion_tag("registry/_zoo_build.html")
def zoo_build_button(field: BoundField) -> dict[str, Any]:
    """What to show under the model field ``field``: nothing unless it names (itself, or
    through the registry entry it resolves to) a zoo model that is not built; nothing for
    a recipe that needs an optional extra (:data:`trainer.zoo.RECIPE_EXTRAS`: the error
    gives its install and build commands, to run from the project directory)."""
    resolved = getattr(field.form, "resolved", None)
    source = str(getattr(resolved, "source", None) or field.value() or "")
    if not source.startswith(ZOO_PREFIX) or zoo_build_problem(source) is None:
        return {"recipe": None}
    recipe = recipe_of(source[len(ZOO_PREFIX) :])
    if recipe in RECIPE_EXTRAS:
        return {"recipe": None}
    return {"recipe": recipe, "building": recipe and zoo_builds.active_status(recipe)}
