"""Which active users can be logged into with a password anyone knows: the demo's, or one
of the most common passwords (the deploy check ``mrl.E001``, webapp/core/checks.py).

A stored password is a slow salted hash (PBKDF2, 1,000,000 iterations by default: about
0.3-0.5 s per verification on a busy core), so only a short list can be tried for each
user: the demo's password and the :data:`COMMON_PASSWORDS_TRIED` most common passwords
of Django's ``CommonPasswordValidator`` list (19,640 passwords, most common first; all of
them would take hours per user). The forms that set a password (the admin's, and
``createsuperuser`` unless told to bypass it) already refuse everything on that list;
what reaches the database unchecked is ``set_password`` called directly, as the demo's
setup does.
"""

from __future__ import annotations

import gzip
import hashlib
from dataclasses import dataclass
from functools import cache

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import check_password
from django.contrib.auth.password_validation import CommonPasswordValidator

DEMO_USERNAME = "demo"
DEMO_PASSWORD = "demo-password"
"""The demo's login (``manage.py demo_setup``), printed in the README and on the console."""

COMMON_PASSWORDS_TRIED = 5
"""How many of the most common passwords are tried per user: with the demo's, at most
``1 + COMMON_PASSWORDS_TRIED`` verifications per stored password (about 3 s at the default
PBKDF2 cost), once: a clean one is remembered until it changes (``PasswordAudit``)."""


@dataclass(frozen=True)
class WellKnownPasswordUser:
    username: str
    is_demo_password: bool


@cache
def most_common_passwords(count: int = COMMON_PASSWORDS_TRIED) -> tuple[str, ...]:
    """The first ``count`` passwords of Django's common-password list (most common first)."""
    # The validator's set has lost the order; its file (a property of an instance) has it.
    path = CommonPasswordValidator().DEFAULT_PASSWORD_LIST_PATH
    with gzip.open(path, "rt") as lines:
        passwords: list[str] = []
        for line in lines:
            if len(passwords) == count:
                break
            if line.strip():
                passwords.append(line.strip())
    return tuple(passwords)


def known_password_of(encoded: str) -> str | None:
    """The well-known password that ``encoded`` (a stored hash) is of, or None."""
    for candidate in (DEMO_PASSWORD, *most_common_passwords()):
        if check_password(candidate, encoded):
            return candidate
    return None


def password_digest(encoded: str) -> str:
    """What :class:`webapp.core.models.PasswordAudit` keeps of a clean stored hash: the
    SHA-256 of it and of the passwords tried, so a new password or a longer list makes
    the record stale."""
    tried = "\n".join((DEMO_PASSWORD, *most_common_passwords()))
    return hashlib.sha256(f"{tried}\n\n{encoded}".encode()).hexdigest()


def users_with_well_known_passwords(database: str = "default") -> list[WellKnownPasswordUser]:
    """The active users of ``database`` whose password is the demo's or a most common one.

    Each stored password is tried once (at most ``1 + COMMON_PASSWORDS_TRIED`` hash
    verifications, about 3 s): a clean one is recorded in
    :class:`webapp.core.models.PasswordAudit` and not tried again until it changes, so a
    server's start costs seconds per new or changed password, not per user."""
    from webapp.core.models import PasswordAudit

    user_model = get_user_model()
    audited = dict(PasswordAudit.objects.using(database).values_list("user_id", "password_digest"))
    found, clean = [], []
    users = user_model.objects.using(database).filter(is_active=True).order_by("pk")
    for user in users.only("pk", "password", user_model.USERNAME_FIELD):
        if not user.has_usable_password():
            continue
        digest = password_digest(user.password)
        if audited.get(user.pk) == digest:
            continue
        password = known_password_of(user.password)
        if password is None:
            clean.append(PasswordAudit(user_id=user.pk, password_digest=digest))
        else:
            found.append(WellKnownPasswordUser(user.get_username(), password == DEMO_PASSWORD))
    PasswordAudit.objects.using(database).bulk_create(
        clean,
        update_conflicts=True,
        unique_fields=["user"],
        update_fields=["password_digest", "checked_at"],
    )
    return found
