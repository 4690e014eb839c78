"""The model registry's pages: list, add, edit, remove a model entry."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from webapp.core import permissions
from webapp.core.services import lab_for_user
from webapp.registry import services
from webapp.registry.forms import ModelEntryForm
from webapp.registry.models import ModelEntry
from webapp.registry.permissions import visible_models
from webapp.registry.sources import extra_zoo_models


@login_required
def model_list(request: HttpRequest) -> HttpResponse:
    entries = visible_models(request.user).select_related("owner", "lab")
    rows = [(entry, permissions.can_edit(request.user, entry)) for entry in entries]
    context = {"rows": rows, "extra_models": extra_zoo_models()}
    return render(request, "registry/model_list.html", context)


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def model_create(request: HttpRequest) -> HttpResponse:
    lab = lab_for_user(request.user)
    form = ModelEntryForm(request.POST or None, lab=lab)
    if request.method == "POST" and form.is_valid():
        entry = services.model_entry_create(owner=request.user, lab=lab, **form.cleaned_data)
        messages.success(request, f"Added {entry.name} to the model registry.")
        return redirect("registry:model_list")
    return render(request, "registry/model_form.html", {"form": form})


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def model_edit(request: HttpRequest, pk: int) -> HttpResponse:
    entry = permissions.get_editable(request.user, ModelEntry.objects, pk)
    form = ModelEntryForm(request.POST or None, instance=entry, lab=entry.lab)
    if request.method == "POST" and form.is_valid():
        services.model_entry_update(entry, **form.cleaned_data)
        messages.success(request, f"Saved {entry.name}.")
        return redirect("registry:model_list")
    return render(request, "registry/model_form.html", {"form": form, "entry": entry})


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def model_delete(request: HttpRequest, pk: int) -> HttpResponse:
    """GET asks for confirmation; POST (with the CSRF token) deletes."""
    entry = permissions.get_editable(request.user, ModelEntry.objects, pk)
    if request.method == "POST":
        name = entry.name
        services.model_entry_delete(entry)
        messages.success(request, f"Removed {name} from the model registry.")
        return redirect("registry:model_list")
    return render(request, "registry/model_confirm_delete.html", {"entry": entry})
