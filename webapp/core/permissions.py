"""Who may see and who may change what.

Everyone in a lab sees everything of that lab; only the owner of an object (or staff)
edits, launches, cancels or deletes it. Objects of other labs are "not found" for an
outsider, so that their existence does not leak.

Each area's models say whose they are (:class:`Owned`: ``access_lab_id`` and
``access_owner_id``), so these rules know no area; each area lists what a user sees
(``visible_runs`` in :mod:`webapp.runs.permissions`, ``visible_models`` in
:mod:`webapp.registry.permissions`).
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import Http404

from webapp.core.models import Lab

AnyUser = AbstractBaseUser | AnonymousUser
M = TypeVar("M", bound=Model)


class Owned(Protocol):
    """An object of a lab with an owner: an experiment, a run (its experiment's), a model
    entry, a suite, an evaluation (its run's lab; its own owner, who launched it)."""

    @property
    def access_lab_id(self) -> int: ...

    @property
    def access_owner_id(self) -> int: ...


def lab_ids(user: AnyUser) -> list[int]:
    """The labs ``user`` belongs to (staff see every lab)."""
    if not user.is_authenticated:
        return []
    if user.is_staff:
        return list(Lab.objects.values_list("id", flat=True))
    return list(user.lab_memberships.values_list("lab_id", flat=True))  # type: ignore[union-attr]


def can_view(user: AnyUser, obj: Owned) -> bool:
    return user.is_authenticated and (user.is_staff or obj.access_lab_id in lab_ids(user))


def can_edit(user: AnyUser, obj: Owned) -> bool:
    """Owner or staff: edit, launch, cancel, delete."""
    return user.is_authenticated and (user.is_staff or obj.access_owner_id == user.pk)


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
