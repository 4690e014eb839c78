from django.apps import AppConfig


class CoreConfig(AppConfig):
    """Cross-cutting pieces: service heartbeats, health probe, demo setup command, the
    deployment's system checks."""

    name = "webapp.core"
    label = "core"

    def ready(self) -> None:
        from webapp.core import checks  # noqa: F401 - registers the checks
