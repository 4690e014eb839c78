"""The experiments and runs a user sees (the rules: :mod:`webapp.core.permissions`)."""

from __future__ import annotations

from django.db.models import QuerySet

from webapp.core.permissions import AnyUser, lab_ids
from webapp.runs.models import Experiment, Run


def visible_experiments(user: AnyUser) -> QuerySet[Experiment]:
    return Experiment.objects.filter(lab_id__in=lab_ids(user))


def visible_runs(user: AnyUser) -> QuerySet[Run]:
    return Run.objects.filter(experiment__lab_id__in=lab_ids(user))
