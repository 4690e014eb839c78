"""Top-level URL map: accounts, dashboard, experiments and runs, the API, admin, health."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from webapp.core import views as core_views
from webapp.core.forms import LoginForm

urlpatterns = [
    path("", include("webapp.dashboard.urls")),
    path("", include("webapp.experiments.urls")),
    path("api/v1/", include("webapp.api.urls")),
    path("", include("webapp.compare.urls")),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(authentication_form=LoginForm),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", core_views.healthz, name="healthz"),
    path("admin/", admin.site.urls),
]
