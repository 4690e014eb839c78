"""System checks of this deployment's settings (``manage.py check --deploy``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DatabaseError, connections

from webapp.core.well_known_passwords import (
    COMMON_PASSWORDS_TRIED,
    users_with_well_known_passwords,
)


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


def password_check_tables() -> tuple[str, str]:
    """The tables the password check reads: the users' and its record of clean ones."""
    from webapp.core.models import PasswordAudit

    return (get_user_model()._meta.db_table, PasswordAudit._meta.db_table)


@register(Tags.security, Tags.database, deploy=True)
def no_user_has_a_well_known_password(
    app_configs: Any = None, databases: list[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """An active user whose password is the demo's (``demo_setup`` run against this
    database) or one of the most common ones is an open door: an error, which stops the
    production entry point (docker/compose.yml runs ``check --deploy --database default
    --fail-level ERROR`` before gunicorn).

    A database check, as Django runs them: only for the databases named with
    ``--database`` (``migrate`` names its own but runs no deploy check), so a plain
    ``check --deploy`` (the image's build, a database not created yet) opens no
    connection. A database without its tables yet (before ``migrate``) is
    skipped; one that cannot be reached is a warning. The cost is bounded in
    webapp/core/well_known_passwords.py: at most 1 + COMMON_PASSWORDS_TRIED hash
    verifications per stored password, once (a clean one is remembered until it
    changes)."""
    messages: list[CheckMessage] = []
    for alias in databases or []:
        try:
            with connections[alias].cursor() as cursor:
                if not set(password_check_tables()) <= set(
                    connections[alias].introspection.table_names(cursor)
                ):
                    continue
            found = users_with_well_known_passwords(alias)
        except DatabaseError as error:
            messages.append(
                Warning(
                    f"Could not check the passwords of database {alias!r}: {error}",
                    hint="Run the check again once the database answers.",
                    id="mrl.W002",
                )
            )
            continue
        if not found:
            continue
        names = ", ".join(
            f"{user.username!r} ({'the demo' if user.is_demo_password else 'a common'} password)"
            for user in found
        )
        messages.append(
            Error(
                f"Active users whose password anyone knows: {names}. Anyone can log in as them.",
                hint="Give each a new password (python manage.py changepassword NAME) or "
                "deactivate them in the admin; demo_setup is for the demo only. Tried: "
                f"the demo's password and the {COMMON_PASSWORDS_TRIED} most common ones.",
                id="mrl.E001",
            )
        )
    return messages
