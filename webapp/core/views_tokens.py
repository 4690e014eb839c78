"""The API tokens page: a person creates, names, lists and revokes their read tokens.

A new token's secret is shown once, in the reply to the POST that made it (never stored,
never put in a message or the session); the list shows each token's first characters,
when it was made and last used, and whether it is revoked. A person sees and revokes
only their own tokens: another's token id is "no such token".
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from webapp.core.digits import INT64_DIGITS, ascii_digits
from webapp.core.forms import PersonalTokenForm
from webapp.core.models import PersonalToken
from webapp.core.services import (
    PERSONAL_TOKEN_PREFIX,
    personal_token_create,
    personal_token_revoke,
)


@never_cache
@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def api_tokens(request: HttpRequest) -> HttpResponse:
    """GET: the list and the form. POST ``name=``: a new token, shown once. POST
    ``revoke=<id>``: that token of the user's stops working."""
    form = PersonalTokenForm(request.POST if "name" in request.POST else None)
    secret = ""
    if request.method == "POST" and "revoke" in request.POST:
        token_id = ascii_digits(request.POST["revoke"], max_digits=INT64_DIGITS)
        revoked = token_id is not None and personal_token_revoke(
            user=request.user, token_id=token_id
        )
        if revoked:
            messages.success(request, "Token revoked: it authenticates nothing from now on.")
        else:
            messages.error(request, "No such active token of yours.")
        return redirect(reverse("core:api_tokens"))
    if request.method == "POST" and form.is_valid():
        try:
            issued = personal_token_create(user=request.user, name=form.cleaned_data["name"])
        except ValidationError as error:
            form.add_error("name", error)
        else:
            secret = issued.secret
            form = PersonalTokenForm()
    tokens = PersonalToken.objects.filter(user=request.user)
    context = {
        "form": form,
        "secret": secret,
        "tokens": tokens[:200],
        "prefix": PERSONAL_TOKEN_PREFIX,
        "api_base": request.build_absolute_uri("/"),
    }
    return render(request, "core/api_tokens.html", context)
