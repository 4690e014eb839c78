"""Write-side operations on the model registry (the experiment writes are in services.py)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from webapp.experiments.models import Lab, ModelEntry

ENTRY_FIELDS = (
    "name",
    "source",
    "tokenizer",
    "family",
    "parameter_count",
    "chat_template",
    "notes",
)


def model_entry_create(*, owner: AbstractBaseUser, lab: Lab, **values: Any) -> ModelEntry:
    """Add a model to ``lab``'s registry; ``values`` are ENTRY_FIELDS, already validated."""
    return ModelEntry.objects.create(
        lab=lab, owner=owner, **{name: values[name] for name in ENTRY_FIELDS if name in values}
    )


def model_entry_update(entry: ModelEntry, **values: Any) -> ModelEntry:
    for name in ENTRY_FIELDS:
        if name in values:
            setattr(entry, name, values[name])
    entry.save()
    return entry


def model_entry_delete(entry: ModelEntry) -> None:
    """Remove ``entry``. Experiments keep working: their configs hold the source itself."""
    entry.delete()
