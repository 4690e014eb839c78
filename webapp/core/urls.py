"""The core app's pages: the person's API tokens."""

from django.urls import path

from webapp.core import views_tokens

app_name = "core"
urlpatterns = [
    path("settings/tokens/", views_tokens.api_tokens, name="api_tokens"),
]
