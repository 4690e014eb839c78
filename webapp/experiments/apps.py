from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    name = "webapp.experiments"
    label = "experiments"
    verbose_name = "Experiments and runs"

    def ready(self) -> None:
        """Register the sharing regimes (the built-in ones and the installed plug-ins)
        at start-up, so that a plug-in that fails to import stops the app here."""
        from trainer.declarations import load_regimes

        load_regimes()
