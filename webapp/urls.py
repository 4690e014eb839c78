"""Top-level URL map: accounts, the dashboard, the admin, and a health probe."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from webapp.core import views as core_views

urlpatterns = [
    path("", include("webapp.dashboard.urls")),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", core_views.healthz, name="healthz"),
    path("admin/", admin.site.urls),
]
