"""``manage.py run_token <run_id>``: issue a new ingestion token for a run and print it.

For running the trainer by hand::

    TOKEN=$(python manage.py run_token 12)
    python -m trainer run ... --ingest-url http://127.0.0.1:8000/api/v1/runs/12/ingest \\
        --token "$TOKEN"

The token goes to stdout alone (so it can be captured); the hint goes to stderr. Issuing
a token revokes the run's previous one.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.urls import reverse

from webapp.runs import services
from webapp.runs.models import Run


class Command(BaseCommand):
    help = "Issue a new ingestion token for a run (revoking the old one) and print it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", type=int, help="the run's id (see /runs/)")

    def handle(self, *args: Any, run_id: int, **options: Any) -> None:
        run = Run.objects.filter(pk=run_id).first()
        if run is None:
            raise CommandError(f"no run #{run_id}")
        token = services.run_token_issue(run)
        self.stdout.write(token)
        self.stderr.write(
            f"New token for {run} (its previous token no longer works); it is shown once.\n"
            f"Ingest URL: http://<host>{reverse('api:ingest', args=[run.pk])}"
        )
