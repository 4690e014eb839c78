from django.apps import AppConfig


class CoreConfig(AppConfig):
    """Cross-cutting pieces: service heartbeats, health probe, demo setup command, the
    deployment's system checks, login throttling's reset on a successful login."""

    name = "webapp.core"
    label = "core"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in

        from webapp.core import checks  # noqa: F401 - registers the checks
        from webapp.core.login_throttling import reset_on_success

        user_logged_in.connect(reset_on_success, dispatch_uid="mrl-login-reset-on-success")
