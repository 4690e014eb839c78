"""Saved comparisons: a compare page's query under a stable URL the lab can open.

The table keeps the name it had in the ``experiments`` app.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse

from webapp.core.models import Lab, LabOwned


class SavedComparison(LabOwned, models.Model):
    """A comparison worth coming back to: its query (run selection + view settings) under
    a stable URL the whole lab can open. Selections by filter (e.g. all SGT runs of a
    pool) pick up new runs as they arrive."""

    lab = models.ForeignKey(Lab, on_delete=models.CASCADE, related_name="comparisons")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="comparisons"
    )
    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=32, unique=True)
    query = models.TextField(help_text="The compare page's query string")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "experiments_savedcomparison"
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("compare:comparison_saved", args=[self.slug])
