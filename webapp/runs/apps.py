from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "webapp.runs"
    label = "runs"
    verbose_name = "Experiments, runs and sweeps"

    def ready(self) -> None:
        """Register the sharing regimes (the built-in ones and the installed plug-ins)
        at start-up, so that a plug-in that fails to import stops the app here."""
        from trainer.declarations import load_regimes

        load_regimes()
