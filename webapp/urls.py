"""Top-level URL map: each area's pages (dashboard: experiments and runs; registry;
evals; compare; metrics' CSVs; core: API tokens), the API, accounts, admin, health."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from webapp.core import views as core_views
from webapp.core.forms import LoginForm

urlpatterns = [
    path("", include("webapp.dashboard.urls")),
    path("", include("webapp.registry.urls")),
    path("", include("webapp.evals.urls")),
    path("", include("webapp.compare.urls")),
    path("", include("webapp.metrics.urls")),
    path("", include("webapp.core.urls")),
    path("api/v1/", include("webapp.metrics.api_urls")),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(authentication_form=LoginForm),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", core_views.healthz, name="healthz"),
    path("admin/", admin.site.urls),
]
