"""The registry's entries a user sees (the rules: :mod:`webapp.core.permissions`)."""

from __future__ import annotations

from django.db.models import QuerySet

from webapp.core.permissions import AnyUser, lab_ids
from webapp.registry.models import EvalSuite, ModelEntry


def visible_models(user: AnyUser) -> QuerySet[ModelEntry]:
    return ModelEntry.objects.filter(lab_id__in=lab_ids(user))


def visible_suites(user: AnyUser) -> QuerySet[EvalSuite]:
    return EvalSuite.objects.filter(lab_id__in=lab_ids(user))
