"""The lab and its people (everyone in a lab sees everything of that lab; only an
object's owner, or staff, changes it) and the services' heartbeats (the dashboard
shows whether a Celery worker is alive).

:class:`Lab` and :class:`LabMembership` keep the tables they had in the ``experiments``
app (``experiments_lab``, ``experiments_labmembership``).
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

NAME_VALIDATOR = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
    "Use 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit.",
)


class LabOwned:
    """What :mod:`webapp.core.permissions` reads of an object with a ``lab`` and an
    ``owner``: everyone in the lab sees it, the owner (or staff) changes it."""

    lab_id: int
    owner_id: int

    @property
    def access_lab_id(self) -> int:
        return self.lab_id

    @property
    def access_owner_id(self) -> int:
        return self.owner_id


class ServiceHeartbeat(models.Model):
    """The last time a background service (e.g. a Celery worker) reported in.

    One row per (service, hostname, pid); each report updates ``seen_at``.
    """

    service = models.CharField(max_length=64, help_text="e.g. 'celery-worker'")
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    seen_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["service", "hostname", "pid"], name="heartbeat_unique_process"
            )
        ]

    def __str__(self) -> str:
        return f"{self.service}@{self.hostname}:{self.pid}"


class Lab(models.Model):
    """A research group sharing one view of all its experiments."""

    name = models.CharField(max_length=100, unique=True)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="LabMembership", related_name="labs"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "experiments_lab"

    def __str__(self) -> str:
        return self.name


class LabMembership(models.Model):
    lab = models.ForeignKey(Lab, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="lab_memberships"
    )
    joined_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "experiments_labmembership"
        constraints = [
            models.UniqueConstraint(fields=["lab", "user"], name="membership_unique_lab_user")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.lab}"


class PersonalToken(models.Model):
    """A person's read token for the API (``Authorization: Bearer mrlp_...``): it reads
    what its owner may read (the lab's permissions, as on the pages) and writes nothing.

    Shown once when created; only its SHA-256 is stored, with its first characters
    (``prefix``) so that the settings page can tell tokens apart. Revoking keeps the row
    (``revoked_at``) for the list's record; a revoked token authenticates nothing. A run's
    ingestion token (``mrl_...``, :mod:`webapp.runs.services`) is another thing: it
    writes one run and reads nothing."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="personal_tokens"
    )
    name = models.CharField(max_length=64, help_text="What it is for, e.g. 'laptop notebook'")
    token_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=16, help_text="The token's first characters, shown")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…) of {self.user_id}"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class PasswordAudit(models.Model):
    """A user's stored password that the deploy check ``mrl.E001`` found to be none of the
    well-known ones it tries (:mod:`webapp.core.well_known_passwords`), so that the next
    start of the server does not try them again.

    ``password_digest`` is the SHA-256 of the stored hash (salted PBKDF2, itself one-way)
    and of the list of passwords tried: a new password (a new salt, so a new hash) or a
    longer list makes the row stale and the user is tried again. Only clean passwords are
    recorded; a well-known one is reported at every start until it is changed."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="password_audit"
    )
    password_digest = models.CharField(max_length=64)
    checked_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"password of {self.user_id} checked at {self.checked_at:%Y-%m-%d %H:%M}"
