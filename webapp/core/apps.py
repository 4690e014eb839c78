from django.apps import AppConfig


class CoreConfig(AppConfig):
    """Cross-cutting pieces: service heartbeats, health probe, demo setup command."""

    name = "webapp.core"
    label = "core"
