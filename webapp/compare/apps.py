from django.apps import AppConfig


class CompareConfig(AppConfig):
    name = "webapp.compare"
    label = "compare"
    verbose_name = "Comparisons and exports"
