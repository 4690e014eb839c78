"""Who may see and who may change what.

Everyone in a lab sees everything of that lab; only the owner of an object (or staff)
edits, launches, cancels or deletes it. Objects of other labs are "not found" for an
outsider, so that their existence does not leak.
"""

from __future__ import annotations

from typing import TypeVar

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import Http404

from webapp.experiments.models import EvalSuite, Evaluation, Experiment, Lab, ModelEntry, Run

AnyUser = AbstractBaseUser | AnonymousUser
M = TypeVar("M", bound=Model)


def lab_ids(user: AnyUser) -> list[int]:
    """The labs ``user`` belongs to (staff see every lab)."""
    if not user.is_authenticated:
        return []
    if user.is_staff:
        return list(Lab.objects.values_list("id", flat=True))
    return list(user.lab_memberships.values_list("lab_id", flat=True))  # type: ignore[union-attr]


def lab_of(obj: Experiment | Run | ModelEntry | Evaluation) -> int:
    if isinstance(obj, Run):
        return obj.experiment.lab_id
    if isinstance(obj, Evaluation):
        return obj.run.experiment.lab_id
    return obj.lab_id


def owner_of(obj: Experiment | Run | ModelEntry | Evaluation) -> int:
    """Who changes ``obj``: a run's experiment's owner; an evaluation's own owner (who
    launched it)."""
    if isinstance(obj, Run):
        return obj.experiment.owner_id
    return obj.owner_id


def can_view(user: AnyUser, obj: Experiment | Run | ModelEntry | Evaluation) -> bool:
    return user.is_authenticated and (user.is_staff or lab_of(obj) in lab_ids(user))


def can_edit(user: AnyUser, obj: Experiment | Run | ModelEntry | Evaluation) -> bool:
    """Owner or staff: edit, launch, cancel, delete."""
    return user.is_authenticated and (user.is_staff or owner_of(obj) == user.pk)


def visible_experiments(user: AnyUser) -> QuerySet[Experiment]:
    return Experiment.objects.filter(lab_id__in=lab_ids(user))


def visible_runs(user: AnyUser) -> QuerySet[Run]:
    return Run.objects.filter(experiment__lab_id__in=lab_ids(user))


def visible_models(user: AnyUser) -> QuerySet[ModelEntry]:
    return ModelEntry.objects.filter(lab_id__in=lab_ids(user))


def visible_suites(user: AnyUser) -> QuerySet[EvalSuite]:
    return EvalSuite.objects.filter(lab_id__in=lab_ids(user))


def get_viewable(user: AnyUser, queryset: QuerySet[M], pk: int) -> M:
    """The object if ``user`` may see it; 404 otherwise (also for other labs' objects)."""
    obj = queryset.filter(pk=pk).first()
    if obj is None or not can_view(user, obj):  # type: ignore[arg-type]
        raise Http404("no such object")
    return obj


def get_editable(user: AnyUser, queryset: QuerySet[M], pk: int) -> M:
    """The object if ``user`` may change it; 404 for outsiders, 403 for lab members."""
    obj = get_viewable(user, queryset, pk)
    if not can_edit(user, obj):  # type: ignore[arg-type]
        raise PermissionDenied("only the owner (or staff) can change this")
    return obj
