"""Write-side operations on the model registry and the evaluation-suite registry (the
experiment writes are in services.py)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from webapp.core.models import Lab
from webapp.registry.models import EvalSuite, ModelEntry

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


# --- evaluation suites ---------------------------------------------------------------------
SUITE_FIELDS = ("name", "description", "tasks")


def eval_suite_create(*, owner: AbstractBaseUser, lab: Lab, **values: Any) -> EvalSuite:
    """Add a suite to ``lab``; ``values`` are SUITE_FIELDS, already validated (tasks: the
    ``[{"name", "type", "path", "limit"}]`` list, paths absolute)."""
    return EvalSuite.objects.create(
        lab=lab, owner=owner, **{name: values[name] for name in SUITE_FIELDS if name in values}
    )


def eval_suite_update(suite: EvalSuite, **values: Any) -> EvalSuite:
    for name in SUITE_FIELDS:
        if name in values:
            setattr(suite, name, values[name])
    suite.save()
    return suite


def eval_suite_auto_users(suite: EvalSuite) -> int:
    """How many experiments evaluate their runs on ``suite`` automatically."""
    return suite.auto_experiments.count()


def eval_suite_delete(suite: EvalSuite) -> None:
    """Remove ``suite``. Its evaluations keep their results and the suite as it was when
    queued (``suite_config``); experiments that evaluated on it automatically stop."""
    suite.delete()
