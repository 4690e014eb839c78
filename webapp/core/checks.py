"""System checks of this deployment's settings (``manage.py check --deploy``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Tags, Warning, register


@register(Tags.security, deploy=True)
def data_directories_are_listed(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Without ``MRL_TASK_DATA_DIRS``, a user may name any file the app can read (its own
    aside) as a suite or task file: a deployment lists its data directories."""
    if getattr(settings, "TASK_DATA_DIRS", []):
        return []
    return [
        Warning(
            "MRL_TASK_DATA_DIRS is not set: any logged-in user may have the web app look at "
            "any file it can read (its own database, secrets and run directories aside) as "
            "a suite or task file.",
            hint="Set MRL_TASK_DATA_DIRS to the directories that hold evaluation and "
            "training data, comma-separated (e.g. /shared/mrl-data).",
            id="mrl.W001",
        )
    ]
