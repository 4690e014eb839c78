"""The login form and the personal token form."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.core.validators import MaxLengthValidator


class LoginForm(AuthenticationForm):
    """Django's login form, with the username's length limit checked as a field error
    (Django sets ``max_length`` after building the field, so it never checks it, and a
    10 kB username would reach the database as a "wrong password")."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        username = self.fields["username"]
        username.validators.append(MaxLengthValidator(username.max_length))


class PersonalTokenForm(forms.Form):
    """A new personal read token: its name."""

    name = forms.CharField(
        max_length=64,
        strip=True,
        help_text="What it is for, e.g. 'laptop notebook'; it reads what you may read.",
    )
