import sys

import redis
from django.contrib.auth.decorators import login_required
from django.db import InterfaceError, OperationalError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template import loader
from django.templatetags.static import static
from django.views import defaults

from accounts.roles import ADJUDICATOR, CLINICIAN, RESEARCHER, has_role, is_admin


@login_required
def home(request: HttpRequest) -> HttpResponse:
    # Each role lands on its own work: admins manage, clinicians rate, researchers analyse,
    # adjudicators settle disagreements.
    user = request.user
    if is_admin(user):
        return redirect("annotation:manage")
    if has_role(user, CLINICIAN):
        return redirect("annotation:queue")
    if has_role(user, RESEARCHER):
        return redirect("/analysis/")
    if has_role(user, ADJUDICATOR):
        return redirect("annotation:adjudicate_index")
    return render(request, "home.html")


def healthz(request: HttpRequest) -> JsonResponse:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok", "database": connection.vendor})


def favicon(request: HttpRequest) -> HttpResponse:
    # Resolved per request, not at import: a hashed static storage names the file only once
    # collectstatic has run.
    return redirect(static("favicon.ico"), permanent=True)


# What a restarting PostgreSQL or Redis raises: the request may succeed a few seconds later.
UNAVAILABLE = (
    OperationalError,
    InterfaceError,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
)


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: a database or cache that is restarting answers 503 "retrying", not an error.

    Django calls this inside the `except` of whatever failed, views and middleware alike, so the
    exception is `sys.exc_info()`. The 503 page touches neither the database nor the cache and
    reloads itself; an autosave that gets 503 keeps its edit and sends it again (rate.js).
    """
    if isinstance(sys.exc_info()[1], UNAVAILABLE):
        response = HttpResponse(loader.render_to_string("503.html"), status=503)
        response["Retry-After"] = "5"
        return response
    return defaults.server_error(request)
