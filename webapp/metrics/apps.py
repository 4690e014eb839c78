from django.apps import AppConfig


class MetricsConfig(AppConfig):
    name = "webapp.metrics"
    label = "metrics"
    verbose_name = "Metrics, transfers and ingestion"

    def ready(self) -> None:
        """Deleting a run locks it first, so no ingestion batch is half-way (issue 35:
        the points have no foreign key in the database; webapp.metrics.deletion)."""
        from django.db.models.signals import pre_delete

        from webapp.metrics.deletion import run_delete_lock
        from webapp.runs.models import Run

        pre_delete.connect(run_delete_lock, sender=Run, dispatch_uid="metrics.run_delete_lock")
