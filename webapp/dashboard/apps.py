from django.apps import AppConfig


class DashboardConfig(AppConfig):
    """The researcher's landing page: experiments, runs and system status."""

    name = "webapp.dashboard"
    label = "dashboard"
