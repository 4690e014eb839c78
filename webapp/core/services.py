"""Writes for the core app: lab membership, the services' heartbeats and personal API
tokens."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from webapp.core.models import Lab, LabMembership, PersonalToken, ServiceHeartbeat

DEFAULT_LAB_NAME = "Lab"


def heartbeat_record(*, service: str, hostname: str, pid: int) -> ServiceHeartbeat:
    """Record that ``service`` on ``hostname``/``pid`` is alive now (an upsert)."""
    heartbeat, _ = ServiceHeartbeat.objects.update_or_create(
        service=service, hostname=hostname, pid=pid, defaults={"seen_at": timezone.now()}
    )
    return heartbeat


def lab_join(user: AbstractBaseUser, lab: Lab | None = None) -> Lab:
    """Add ``user`` to ``lab`` (default: the default lab, created on first use)."""
    if lab is None:
        lab, _ = Lab.objects.get_or_create(name=DEFAULT_LAB_NAME)
    LabMembership.objects.get_or_create(lab=lab, user=user)
    return lab


def lab_for_user(user: AbstractBaseUser) -> Lab:
    """The lab new experiments of ``user`` go to: their first lab."""
    membership = (
        LabMembership.objects.filter(user=user).select_related("lab").order_by("id").first()
    )
    if membership is None:
        raise PermissionDenied("you are not a member of any lab; ask an admin to add you")
    return membership.lab


# --- personal API tokens -----------------------------------------------------------------
PERSONAL_TOKEN_PREFIX = "mrlp_"
"""A personal read token is ``mrlp_`` + 43 random URL-safe characters (a run's ingestion
token starts ``mrl_``: neither is ever taken for the other)."""
PERSONAL_TOKEN_SHOWN = 12
"""How many of a token's first characters the settings page shows to tell tokens apart."""
MAX_PERSONAL_TOKENS = 50
"""Active tokens a person may hold at once."""
LAST_USED_RESOLUTION = timedelta(minutes=1)
"""``last_used_at`` is written at most once a minute per token, not on every request."""


def personal_token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class IssuedToken:
    """A new token: the row, and the secret itself (shown once, never stored)."""

    record: PersonalToken
    secret: str


def personal_token_create(*, user: AbstractBaseUser, name: str) -> IssuedToken:
    """A new read token of ``user`` named ``name`` (1-64 characters after trimming)."""
    name = name.strip()
    if not name:
        raise ValidationError("Give the token a name, e.g. 'laptop notebook'.")
    if len(name) > 64 or "\x00" in name:
        raise ValidationError("A token's name has at most 64 characters and no NUL.")
    active = PersonalToken.objects.filter(user=user, revoked_at__isnull=True).count()
    if active >= MAX_PERSONAL_TOKENS:
        raise ValidationError(
            f"You hold {active} active tokens, the most allowed; revoke one you no longer use."
        )
    secret = PERSONAL_TOKEN_PREFIX + secrets.token_urlsafe(32)
    record = PersonalToken.objects.create(
        user=user,
        name=name,
        token_hash=personal_token_hash(secret),
        prefix=secret[:PERSONAL_TOKEN_SHOWN],
    )
    return IssuedToken(record=record, secret=secret)


def personal_token_revoke(*, user: AbstractBaseUser, token_id: int) -> bool:
    """Revoke ``user``'s token ``token_id``; False when ``user`` has no such active token
    (another person's token is never touched). A conditional UPDATE: one row or none."""
    changed = PersonalToken.objects.filter(pk=token_id, user=user, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    return changed == 1


def personal_token_authenticate(token: str) -> PersonalToken | None:
    """The active token ``token`` is, with its (active) user loaded, or None; notes when it
    was used (at most once a :data:`LAST_USED_RESOLUTION`)."""
    if not token.startswith(PERSONAL_TOKEN_PREFIX) or len(token) > 200:
        return None
    record = (
        PersonalToken.objects.select_related("user")
        .filter(token_hash=personal_token_hash(token), revoked_at__isnull=True)
        .first()
    )
    if record is None or not record.user.is_active:
        return None
    now = timezone.now()
    if record.last_used_at is None or now - record.last_used_at >= LAST_USED_RESOLUTION:
        PersonalToken.objects.filter(pk=record.pk).update(last_used_at=now)
        record.last_used_at = now
    return record
