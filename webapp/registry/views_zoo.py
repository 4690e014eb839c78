"""The compose page's "Build <recipe> zoo" button: start the build as a background job.

The button sits next to a policy's "not built" error, inside the compose form, and submits
a small form of its own (outside the compose form, with the CSRF token) to
:func:`zoo_build`. The page's script sends it with ``fetch()`` and shows the answer (JSON)
in place, so nothing typed in the compose form is lost; without the script the browser
posts it and comes back to the page (``next``) with a message.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods

from scheduler import dispatch
from trainer.zoo import RECIPE_EXTRAS, ZOO_RECIPES
from webapp.core.services import lab_for_user
from webapp.registry import zoo_builds


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def zoo_build(request: HttpRequest) -> HttpResponse:
    """POST ``recipe``: build it into the zoo the runs read, unless it is being built
    already; GET (or HEAD) ``?recipe=``: how far its build is (JSON, for the page's script)."""
    lab_for_user(request.user)  # 403 for someone in no lab
    recipe = (request.POST if request.method == "POST" else request.GET).get("recipe", "")
    if recipe not in ZOO_RECIPES:
        return HttpResponseBadRequest(
            "unknown zoo recipe; the recipes are "
            + ", ".join(name for name in ZOO_RECIPES if name not in RECIPE_EXTRAS),
            content_type="text/plain; charset=utf-8",
        )
    if recipe in RECIPE_EXTRAS and request.method == "POST":
        return HttpResponseBadRequest(
            f"the {recipe} zoo needs an optional extra and is not built from the web app; "
            f"from the project directory run `scripts/bootstrap-venv {RECIPE_EXTRAS[recipe]}`"
            f" then `python -m trainer zoo build --recipe {recipe}`",
            content_type="text/plain; charset=utf-8",
        )
    if request.method in ("GET", "HEAD"):
        build = zoo_builds.load(recipe)
        return JsonResponse(build.as_json() if build else {"recipe": recipe, "state": "none"})

    build, claimed = zoo_builds.claim(recipe)
    if claimed and not dispatch.send_zoo_build(recipe, build.zoo_dir):
        zoo_builds.fail(build, "the job queue could not be reached; try again later")
        message, status = f"Could not start building the {recipe} zoo: {build.error}.", 503
    elif claimed:
        message, status = f"Building the {recipe} zoo (started): {build.progress}.", 202
    else:
        message, status = f"The {recipe} zoo is being built already: {build.progress}.", 200
    if "application/json" in request.headers.get("Accept", ""):
        return JsonResponse({**build.as_json(), "message": message}, status=status)
    (messages.success if status < 300 else messages.error)(request, message)
    return redirect(_next(request))


def _next(request: HttpRequest) -> str:
    """Where the button was pressed (a page of this site), else a new experiment."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return reverse("dashboard:experiment_create")
